"""The sweep file's schema: Pydantic v2 models for sweep.yaml (sweep/loader.py reads a file
into them and checks it against its base job).

    study: lr-sweep                  # default: the sweep file's name
    storage: null                    # default: sqlite:///<runs>/sweeps/<study>.db
    base: quickstart.yaml            # a job file (relative to this file) or an inline job mapping
    space:
      hyp:
        lr0: {low: 1.0e-4, high: 1.0e-2, log: true}
        mosaic: {low: 0.0, high: 1.0}
        optimizer: {choices: [SGD, AdamW]}
      overrides:
        cache: {choices: [false, ram]}
    objective: {metric: fitness, direction: maximize}   # or a list of them (multi-objective)
    sampler: tpe                     # tpe | cmaes | gp | random | grid | nsga2, or {name: tpe, seed: 0, ...}
    pruner: median                   # median | hyperband | threshold | none, or {name: median, ...}
    budget: {n_trials: 20, timeout: null}
"""

from __future__ import annotations

import math
import re
import typing
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from orchestrator import tasks
from orchestrator.jobspec import ultralytics_cfg
from orchestrator.jobspec.job import Hyperparameters


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ----------------------------------------------------------------------------- parameters

Scalar = Union[bool, int, float, str, None]
PARAM_TYPES = ("float", "int", "categorical")


class ParamSpec(Strict):
    """One dimension of the search space. `type` may be left out: `choices` means
    categorical; otherwise the parameter's own type decides (lr0 float, close_mosaic int)."""

    type: Optional[Literal[PARAM_TYPES]] = None  # type: ignore[valid-type]
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = Field(default=None, gt=0)
    choices: Optional[list[Scalar]] = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _consistent(self):
        kind = self.type or ("categorical" if self.choices is not None else None)
        if kind == "categorical":
            if self.choices is None:
                raise ValueError("a categorical parameter needs `choices` (a non-empty list)")
            extra = [k for k in ("low", "high", "step") if getattr(self, k) is not None] + (["log"] if self.log else [])
            if extra:
                raise ValueError(f"{', '.join(extra)} not allowed with `choices`")
            if len({repr(c) for c in self.choices}) != len(self.choices):
                raise ValueError(f"choices: duplicate values in {self.choices!r}")
            return self
        if self.choices is not None:
            raise ValueError(f"`choices` not allowed for type {kind}; drop `type` or the choices")
        if self.low is None or self.high is None:
            missing = " and ".join(k for k in ("low", "high") if getattr(self, k) is None)
            raise ValueError(f"a range needs `low` and `high` ({missing} missing); or give `choices`")
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError(f"low and high must be finite numbers (got {self.low}, {self.high})")
        if self.low == self.high:
            raise ValueError(f"empty range: low == high == {num_text(self.low)}; "
                             "widen it, or fix the value in the base job instead")
        if self.low > self.high:
            raise ValueError(f"inverted range: low ({num_text(self.low)}) > high ({num_text(self.high)})")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0 (got {num_text(self.low)})")
        if self.log and self.step is not None:
            raise ValueError("`log` and `step` cannot be combined (Optuna)")
        if self.step is not None and self.step > self.high - self.low:
            raise ValueError(f"step {num_text(self.step)} is larger than the range {num_text(self.low)}..{num_text(self.high)}")
        return self


def num_text(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def hyp_kind(name: str) -> str:
    """float | int | bool | choice: what the hyperparameter takes (from the job spec's type)."""
    ann = Hyperparameters.model_fields[name].annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)] or [ann]
    base = args[0]
    if typing.get_origin(base) is Literal:
        return "choice"
    return {float: "float", int: "int", bool: "bool"}.get(base, "choice")


HypSpace = create_model(  # one optional ParamSpec per Ultralytics hyperparameter: unknown names are errors
    "HypSpace",
    __config__=ConfigDict(extra="forbid"),
    **{name: (Optional[ParamSpec], None) for name in Hyperparameters.model_fields},
)


class Space(Strict):
    hyp: HypSpace = Field(default_factory=HypSpace)  # type: ignore[valid-type]
    overrides: dict[str, ParamSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _not_empty(self):
        if not self.params():
            raise ValueError("empty search space: give at least one parameter under space.hyp or space.overrides")
        return self

    def params(self) -> dict[str, ParamSpec]:
        """{'hyp.lr0': ParamSpec, 'overrides.cache': ParamSpec}: the Optuna parameter names."""
        out = {f"hyp.{k}": v for k, v in self.hyp if v is not None}
        out.update({f"overrides.{k}": v for k, v in self.overrides.items()})
        return out


# ----------------------------------------------------------------------------- objective

METRIC_ALIASES = tasks.METRIC_ALIASES
METRICS = ("fitness", *tasks.all_metric_keys())


class Objective(Strict):
    metric: str = Field(default="fitness", description="Ultralytics fitness (the task's: detect mAP50-95, classify "
                        "(top-1 + top-5)/2, ...), a metrics/ or loss key, or a short name (mAP50-95, mask-mAP50-95, top1, "
                        "mIoU, delta1)")
    direction: Optional[Literal["maximize", "minimize"]] = Field(
        default=None, description="default: minimize for losses and depth's errors, maximize otherwise")

    @field_validator("metric")
    @classmethod
    def _known(cls, v: str) -> str:
        v = METRIC_ALIASES.get(v, v)
        if v not in METRICS:
            known = ", ".join(["fitness", *METRIC_ALIASES, *(m for m in METRICS if "loss" in m)])
            raise ValueError(f"unknown metric '{v}'; expected one of {known}{ultralytics_cfg.suggest(v, METRICS)}")
        return v

    @model_validator(mode="after")
    def _direction(self):
        if self.direction is None:
            lower = "loss" in self.metric or self.metric in tasks.LOWER_IS_BETTER  # depth's errors
            self.direction = "minimize" if lower else "maximize"
        return self


# ----------------------------------------------------------------------------- sampler / pruner

STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,47}")  # a study's runs, files and Slurm job are named by it
STUDY_RULE = "a study name is letters, digits, '.', '_', '-', at most 48 characters, starting with a letter or digit"


SAMPLERS = ("tpe", "cmaes", "gp", "random", "grid", "nsga2")
PRUNERS = ("median", "hyperband", "threshold", "none")
_SAMPLER_OPTIONS = {
    "n_startup_trials": ("tpe", "cmaes", "gp"),
    "multivariate": ("tpe",),
    "population_size": ("nsga2",),
    "startup": ("tpe",),
    "startup_scale": ("tpe",),
}
_PRUNER_OPTIONS = {
    "n_startup_trials": ("median",),
    "n_warmup_steps": ("median", "threshold"),
    "interval_steps": ("median", "threshold"),
    "min_resource": ("hyperband",),
    "max_resource": ("hyperband",),
    "reduction_factor": ("hyperband",),
    "lower": ("threshold",),
    "upper": ("threshold",),
}


def _named(v):
    return {"name": v} if isinstance(v, str) else v


# The draws' spread as a share of each range. Ultralytics' tuner mutates a value by ~12 % of
# itself (sigma 0.2 x uniform(0, 1)); over its default space from its default start that is
# 0.1-12 % of the range, about 5 % in the middle. The first default, 0.1, drew e.g. cls
# 0.5 +- 0.39 on 0.1..4: much wider than the tuner's steps (docs/sweeps.md, "Local startup").
DEFAULT_STARTUP_SCALE = 0.05


class SamplerSpec(Strict):
    name: Literal[SAMPLERS] = "tpe"  # type: ignore[valid-type]
    seed: Optional[int] = Field(default=None, ge=0, le=2**31 - 1)
    n_startup_trials: Optional[int] = Field(default=None, ge=0, le=100000)
    multivariate: Optional[bool] = None
    population_size: Optional[int] = Field(default=None, ge=2, le=100000)
    # tpe: where the n_startup_trials draws come from: `random` over the space (Optuna's way)
    # or `local`, Gaussian steps of `startup_scale` x each range from the start (the first
    # enqueue point, the rest from the base job); orchestrator/sweep/local_startup.py
    startup: Optional[Literal["random", "local"]] = None
    startup_scale: Optional[float] = Field(default=None, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _options_fit(self):
        for key, names in _SAMPLER_OPTIONS.items():
            if getattr(self, key) is not None and self.name not in names:
                raise ValueError(f"{key}: not an option of the {self.name} sampler (only {', '.join(names)})")
        if self.startup_scale is not None and self.startup != "local":
            raise ValueError("startup_scale: only with `startup: local` (the spread of the draws near the start)")
        return self

    @property
    def local_scale(self) -> float:
        """The spread of `startup: local` draws: `startup_scale`, else the default."""
        return self.startup_scale or DEFAULT_STARTUP_SCALE


class PrunerSpec(Strict):
    name: Literal[PRUNERS] = "median"  # type: ignore[valid-type]
    n_startup_trials: Optional[int] = Field(default=None, ge=0, le=100000)
    n_warmup_steps: Optional[int] = Field(default=None, ge=0, le=100000)
    interval_steps: Optional[int] = Field(default=None, ge=1, le=100000)
    min_resource: Optional[int] = Field(default=None, ge=1, le=100000)
    max_resource: Optional[Union[int, Literal["auto"]]] = None
    reduction_factor: Optional[int] = Field(default=None, ge=2, le=100)
    lower: Optional[float] = None
    upper: Optional[float] = None

    @model_validator(mode="after")
    def _options_fit(self):
        for key, names in _PRUNER_OPTIONS.items():
            if getattr(self, key) is not None and self.name not in names:
                raise ValueError(f"{key}: not an option of the {self.name} pruner (only {', '.join(names)})")
        if self.name == "threshold":
            if self.lower is None and self.upper is None:
                raise ValueError("the threshold pruner needs `lower`, `upper` or both")
            if self.lower is not None and self.upper is not None and self.lower > self.upper:
                raise ValueError(f"inverted thresholds: lower ({self.lower}) > upper ({self.upper})")
        if isinstance(self.max_resource, int) and self.max_resource < 1:
            raise ValueError("max_resource: must be 'auto' or an integer >= 1")
        return self


# ----------------------------------------------------------------------------- the sweep

class Budget(Strict):
    n_trials: int = Field(default=20, ge=1, le=100000,
                          description="COMPLETE + PRUNED trials the study must reach, in total (not per run)")
    timeout: Optional[float] = Field(default=None, gt=0, description="seconds; no new trial starts after it")
    epochs: Optional[int] = Field(default=None, ge=1, le=10_000_000,
                                  description="training epochs over all trials, pruned ones counting the epochs "
                                              "they ran; no new trial starts once the study has spent them")
    max_consecutive_failures: int = Field(default=3, ge=1, le=1000,
                                          description="a worker gives up after this many failed trials in a row")


class Heartbeat(Strict):
    """Crash safety (RDB storage): a RUNNING trial whose worker stopped beating for
    `grace_period` seconds becomes FAIL and is retried (at most `max_retry` times)."""

    interval: int = Field(default=10, ge=1, le=3600)
    grace_period: Optional[int] = Field(default=None, ge=1, le=86400, description="default: 6 x interval")
    max_retry: int = Field(default=3, ge=0, le=100)

    @property
    def grace(self) -> int:
        return self.grace_period or 6 * self.interval

    @model_validator(mode="after")
    def _grace_longer(self):
        if self.grace_period is not None and self.grace_period <= self.interval:
            raise ValueError(f"grace_period ({self.grace_period}) must be longer than interval ({self.interval})")
        return self


class SweepSpec(Strict):
    study: Optional[str] = Field(default=None, description="study name (letters, digits, '.', '_', '-'; at most 48 "
                                 "characters); default: the sweep file's name")
    storage: Optional[str] = Field(default=None, min_length=1,
                                   description="SQLAlchemy URL; default sqlite:///<runs>/sweeps/<study>.db")
    base: Union[str, dict[str, Any]] = Field(description="the base job: a job file (relative to this file) or inline")
    space: Space
    objective: list[Objective] = Field(default_factory=lambda: [Objective()], min_length=1, max_length=8,
                                       description="one objective, or a list of them (multi-objective)")
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: Optional[PrunerSpec] = Field(default=None, description="default: median (none for several objectives)")
    budget: Budget = Field(default_factory=Budget)
    workers: int = Field(default=1, ge=1, le=256, description="local worker processes")
    devices_per_trial: Optional[int] = Field(
        default=None, ge=1, le=1024,
        description="pin each local worker to its own group of this many GPUs (CUDA_VISIBLE_DEVICES) or CPU "
        "cores (the base job's kind): G visible devices give G/N workers, each trial planned for its group")
    heartbeat: Heartbeat = Field(default_factory=Heartbeat)
    enqueue: list[dict[str, Any]] = Field(default_factory=list,
                                          description="points evaluated first, e.g. [{hyp: {lr0: 0.002}}]")

    @field_validator("study")
    @classmethod
    def _safe_study(cls, v):
        if v is not None and ".." in v:
            raise ValueError(f"must not contain '..' (got {v!r})")
        if v is not None and not STUDY_NAME.fullmatch(v):
            raise ValueError(f"{STUDY_RULE} (got {v[:60]!r})")
        return v

    _sampler = field_validator("sampler", mode="before")(classmethod(lambda cls, v: _named(v)))
    _pruner = field_validator("pruner", mode="before")(classmethod(lambda cls, v: _named(v)))

    @field_validator("objective", mode="before")
    @classmethod
    def _objective_short(cls, v):
        if isinstance(v, (str, dict)):
            v = [v]
        if isinstance(v, list):
            if not v:
                raise ValueError("give at least one objective")
            return [{"metric": x} if isinstance(x, str) else x for x in v]
        return v

    @field_validator("base", mode="before")
    @classmethod
    def _base_kind(cls, v):
        if isinstance(v, str) and not v.strip():
            raise ValueError("path of the base job must not be empty")
        if not isinstance(v, (str, dict)):
            raise ValueError(f"expected a job file path or an inline job mapping (got {type(v).__name__})")
        return v

    @model_validator(mode="after")
    def _default_pruner(self):
        if self.pruner is None:  # Optuna prunes single-objective studies only
            self.pruner = PrunerSpec(name="none" if len(self.objective) > 1 else "median")
        return self

    @property
    def objectives(self) -> list[Objective]:
        return self.objective

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]
