"""`sampler: {name: tpe, startup: local}`: TPE's startup trials are Gaussian steps from the
start (the first enqueue point, the rest from the base job), then TPE's own model takes over.
Real Optuna studies on a synthetic objective (no training)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

from orchestrator.sweep.local_startup import near
from conftest import space, write_sweep


def draws(center, dist, scale=0.1, n=4000, seed=0):
    rng = np.random.RandomState(seed)
    return [near(center, dist, scale, rng) for _ in range(n)]


def test_float_draws_centre_on_the_start_with_the_spread_asked():
    xs = draws(7.5, FloatDistribution(1.0, 20.0), scale=0.05)
    assert all(1.0 <= x <= 20.0 for x in xs)
    assert statistics.mean(xs) == pytest.approx(7.5, abs=0.05)
    assert statistics.stdev(xs) == pytest.approx(0.05 * 19.0, rel=0.05)


def test_log_ranges_step_in_log_space():
    xs = draws(1e-3, FloatDistribution(1e-5, 1e-1, log=True), scale=0.1)
    logs = [math.log(x) for x in xs]
    assert statistics.mean(logs) == pytest.approx(math.log(1e-3), abs=0.05)
    assert statistics.stdev(logs) == pytest.approx(0.1 * math.log(1e4), rel=0.05)


def test_a_start_on_the_bound_is_reflected_not_piled_on_it():
    xs = draws(1.0, FloatDistribution(0.0, 1.0), scale=0.1)
    assert all(0.0 <= x <= 1.0 for x in xs)
    assert sum(x == 1.0 for x in xs) < 5, "clipping would put half the draws exactly on the bound"
    assert statistics.mean(xs) == pytest.approx(1.0 - 0.1 * math.sqrt(2 / math.pi), abs=0.01)


def test_steps_ints_and_categoricals():
    stepped = draws(0.5, FloatDistribution(0.0, 1.0, step=0.25))
    assert set(stepped) <= {0.0, 0.25, 0.5, 0.75, 1.0} and stepped.count(0.5) > len(stepped) / 2
    ints = draws(5, IntDistribution(0, 10), scale=0.2)
    assert all(isinstance(x, int) and 0 <= x <= 10 for x in ints) and len(set(ints)) > 5
    choices = draws("SGD", CategoricalDistribution(["SGD", "AdamW", "Adam"]))
    assert choices.count("SGD") / len(choices) == pytest.approx(0.5 + 0.5 / 3, abs=0.03)
    assert set(choices) == {"SGD", "AdamW", "Adam"}


def test_start_is_the_first_enqueue_point_then_the_base_job(tmp_path):
    from orchestrator.sweep.loader import load_sweep

    path = write_sweep(tmp_path, sampler={"name": "tpe", "startup": "local"},
                       space=space(lr0={"low": 1e-4, "high": 1e-2}, box={"low": 1.0, "high": 20.0},
                                   mosaic={"low": 0.0, "high": 0.5}, optimizer={"choices": ["SGD", "AdamW"]}),
                       enqueue=[{"hyp": {"box": 3.0}}, {"hyp": {"box": 9.0}}])
    start = load_sweep(path).start_point()
    # box from the first enqueue point; lr0 and optimizer inline in the base job; the preset's
    # mosaic (1.0) lies outside this space, so that dimension has no start (drawn at random)
    assert start == {"hyp.lr0": 0.002, "hyp.box": 3.0, "hyp.optimizer": "AdamW"}


def test_startup_trials_stay_near_the_start_then_tpe_takes_over(tmp_path):
    import optuna

    from orchestrator.sweep.objective import suggest
    from orchestrator.sweep.loader import load_sweep
    from orchestrator.sweep.study import make_sampler

    path = write_sweep(tmp_path, sampler={"name": "tpe", "seed": 3, "n_startup_trials": 4, "startup": "local",
                                          "startup_scale": 0.02},
                       space=space(lr0={"low": 1e-4, "high": 1e-2, "log": True}, box={"low": 1.0, "high": 20.0}),
                       enqueue=[{"hyp": {"box": 7.5}}])
    loaded = load_sweep(path)
    study = optuna.create_study(sampler=make_sampler(loaded.spec.sampler, loaded.params, start=loaded.start_point()))
    study.enqueue_trial(loaded.enqueue[0])
    for _ in range(14):
        trial = study.ask()
        p = suggest(trial, loaded.params)
        study.tell(trial, -abs(math.log10(p["hyp.lr0"] / 3e-3)) - abs(p["hyp.box"] - 15.0) / 19)

    def distance(t):  # in units of each range (log range for lr0)
        return max(abs(math.log10(t.params["hyp.lr0"] / 2e-3)) / 2, abs(t.params["hyp.box"] - 7.5) / 19)

    trials = study.get_trials()
    assert trials[0].params["hyp.box"] == 7.5  # enqueued; its lr0 is a startup draw near the base job's
    startup = [distance(t) for t in trials[:4]]
    assert max(startup) < 5 * 0.02, startup  # Gaussian steps of 0.02 x range
    later = [distance(t) for t in trials[4:]]
    assert max(later) > 0.2, later  # TPE's model of the whole space, no longer tied to the start


@pytest.mark.parametrize("sampler,expected", [
    ({"name": "cmaes", "startup": "local"}, "sampler: startup: not an option of the cmaes sampler"),
    ({"name": "tpe", "startup_scale": 0.2}, "sampler: startup_scale: only with `startup: local`"),
    ({"name": "tpe", "startup": "local", "startup_scale": 2.0}, "sampler.startup_scale: must be less than or equal"),
    ({"name": "tpe", "startup": "nearby"}, "sampler.startup:"),
])
def test_bad_startup_options_exit_2(tmp_path, sampler, expected):
    from conftest import run_cli

    path = write_sweep(tmp_path, sampler=sampler, enqueue=[])
    result = run_cli("sweep", path, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert expected in result.stderr, result.stderr
    assert not (tmp_path / "runs").exists()


def test_local_startup_without_any_start_exits_2(tmp_path):
    from conftest import run_cli

    # the base job's lr0 (0.002) is outside the space and nothing is enqueued
    path = write_sweep(tmp_path, sampler={"name": "tpe", "startup": "local"}, enqueue=[],
                       space=space(lr0={"low": 0.02, "high": 0.05}))
    result = run_cli("sweep", path, cwd=tmp_path)
    assert result.returncode == 2
    assert "sampler.startup: `local` searches near a start, but no dimension of the space has one" in result.stderr
