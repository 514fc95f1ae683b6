"""TPE whose startup trials are drawn near the start instead of anywhere in the space.

TPE begins with `n_startup_trials` random draws over the whole space. In 8 dimensions most
of them land far from a base job that already trains well, and the sweep spends its first
epochs confirming that. Ultralytics' tuner does the opposite: it mutates its start (a local
search). `sampler: {name: tpe, startup: local}` combines the two: the startup draws are
Gaussian steps from the start (the first `enqueue:` point, the rest from the base job), and
TPE takes over from there with its usual model of the whole space, so a good region far
from the start can still be found. Runs in the sweep worker (imports optuna, never torch).

Measured against the tuner it did not help with early pruning: draws near a good start differ
from it by little, and an early pruner cuts them (docs/sweeps.md, "Local startup"). Hence opt-in.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

# The trials TPE counts towards its startup (optuna/samplers/_tpe/sampler.py): the same
# count here, so the local draws end exactly where TPE's model begins.
_COUNTED = (TrialState.COMPLETE, TrialState.PRUNED)


class LocalStartupSampler(optuna.samplers.BaseSampler):
    def __init__(self, tpe: optuna.samplers.TPESampler, start: dict[str, Any], scale: float,
                 n_startup_trials: int, seed: int | None = None):
        self._tpe = tpe
        self._start = dict(start)
        self._scale = float(scale)
        self._n_startup = int(n_startup_trials)
        self._rng = np.random.RandomState(seed)

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()
        self._rng.seed()

    def _in_startup(self, study: optuna.Study) -> bool:
        return len(study._get_trials(deepcopy=False, states=_COUNTED, use_cache=True)) < self._n_startup

    def infer_relative_search_space(self, study, trial):
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return {} if self._in_startup(study) else self._tpe.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name: str, param_distribution: BaseDistribution):
        if param_name in self._start and self._in_startup(study):
            return near(self._start[param_name], param_distribution, self._scale, self._rng)
        return self._tpe.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial: FrozenTrial) -> None:
        self._tpe.before_trial(study, trial)

    def after_trial(self, study, trial: FrozenTrial, state: TrialState, values) -> None:
        self._tpe.after_trial(study, trial, state, values)


def near(center: Any, dist: BaseDistribution, scale: float, rng: np.random.RandomState) -> Any:
    """One Gaussian step from `center`: its standard deviation is `scale` times the range
    (in log space for log ranges), reflected at the ends so the bounds get no extra mass.
    A categorical keeps the start's choice half the time, else any choice."""
    if isinstance(dist, CategoricalDistribution):
        if center in dist.choices and rng.rand() < 0.5:
            return center
        return dist.choices[rng.randint(len(dist.choices))]
    assert isinstance(dist, (FloatDistribution, IntDistribution))
    low, high = float(dist.low), float(dist.high)
    to, back = (math.log, math.exp) if dist.log else (float, float)
    lo, hi = to(low), to(high)
    if hi <= lo:
        return dist.low
    u = (to(min(max(float(center), low), high)) - lo) / (hi - lo)
    u = _reflect(u + scale * rng.standard_normal())
    x = min(max(back(lo + u * (hi - lo)), low), high)
    step = dist.step
    if step is not None:  # on the grid Optuna would sample from
        x = low + round((x - low) / step) * step
        x = min(max(x, low), low + math.floor((high - low) / step + 1e-9) * step)
    if isinstance(dist, IntDistribution):
        return int(round(x))
    return float(x)


def _reflect(u: float) -> float:
    """Fold u back into [0, 1] like a mirror at both ends (1.2 -> 0.8, -0.1 -> 0.1)."""
    u = math.fmod(abs(u), 2.0)
    return 2.0 - u if u > 1.0 else u
