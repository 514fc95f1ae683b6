"""The sweep spec: Pydantic v2 models for sweep.yaml, and `load_sweep()` which also
validates the base job and checks every range end and choice against the job spec, so
a bad sweep fails before anything runs (SpecError lines naming the field, exit 2).

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

import copy
import math
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator, model_validator

from orchestrator.spec import ultralytics_cfg
from orchestrator.spec.errors import SpecError, format_pydantic_errors
from orchestrator.spec.job import NAME_PATTERN, Hyperparameters
from orchestrator.spec.loader import LoadedJob, check_overrides, load_job_dict, resolve_hyp, resolve_relative
from orchestrator.spec.yamlio import read_yaml_file


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
            raise ValueError(f"empty range: low == high == {_num(self.low)}; "
                             "widen it, or fix the value in the base job instead")
        if self.low > self.high:
            raise ValueError(f"inverted range: low ({_num(self.low)}) > high ({_num(self.high)})")
        if self.log and self.low <= 0:
            raise ValueError(f"log scale needs low > 0 (got {_num(self.low)})")
        if self.log and self.step is not None:
            raise ValueError("`log` and `step` cannot be combined (Optuna)")
        if self.step is not None and self.step > self.high - self.low:
            raise ValueError(f"step {_num(self.step)} is larger than the range {_num(self.low)}..{_num(self.high)}")
        return self


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _hyp_kind(name: str) -> str:
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

METRIC_ALIASES = {
    "mAP50-95": "metrics/mAP50-95(B)",
    "mAP50": "metrics/mAP50(B)",
    "precision": "metrics/precision(B)",
    "recall": "metrics/recall(B)",
}
METRICS = (
    "fitness",
    "metrics/mAP50-95(B)", "metrics/mAP50(B)", "metrics/precision(B)", "metrics/recall(B)",
    "val/box_loss", "val/cls_loss", "val/dfl_loss",
    "train/box_loss", "train/cls_loss", "train/dfl_loss",
)


class Objective(Strict):
    metric: str = Field(default="fitness", description="Ultralytics fitness (detect: mAP50-95), a metrics/ or loss key")
    direction: Optional[Literal["maximize", "minimize"]] = Field(
        default=None, description="default: minimize for losses, maximize otherwise")

    @field_validator("metric")
    @classmethod
    def _known(cls, v: str) -> str:
        v = METRIC_ALIASES.get(v, v)
        if v not in METRICS:
            known = ", ".join(["fitness", *METRIC_ALIASES, *METRICS[5:]])
            raise ValueError(f"unknown metric '{v}'; expected one of {known}{ultralytics_cfg.suggest(v, METRICS)}")
        return v

    @model_validator(mode="after")
    def _direction(self):
        if self.direction is None:
            self.direction = "minimize" if "loss" in self.metric else "maximize"
        return self


# ----------------------------------------------------------------------------- sampler / pruner

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
    study: Optional[str] = Field(default=None, pattern=NAME_PATTERN, max_length=48,
                                 description="study name; default: the sweep file's name")
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
    heartbeat: Heartbeat = Field(default_factory=Heartbeat)
    enqueue: list[dict[str, Any]] = Field(default_factory=list,
                                          description="points evaluated first, e.g. [{hyp: {lr0: 0.002}}]")

    @field_validator("study")
    @classmethod
    def _safe_study(cls, v):
        if v is not None and ".." in v:
            raise ValueError(f"must not contain '..' (got {v!r})")
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


# ----------------------------------------------------------------------------- loading

@dataclass
class Param:
    """A resolved search dimension: name ('hyp.lr0'), kind and the Optuna distribution's arguments."""

    name: str
    kind: str  # float | int | categorical
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: list | None = None

    @property
    def section(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def key(self) -> str:
        return self.name.split(".", 1)[1]

    def distribution(self):
        import optuna

        if self.kind == "categorical":
            return optuna.distributions.CategoricalDistribution(self.choices)
        if self.kind == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log,
                                                        step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(float(self.low), float(self.high), log=self.log, step=self.step)

    def grid(self) -> list | None:
        """The finite values of this dimension, for the grid sampler (None: continuous)."""
        if self.kind == "categorical":
            return list(self.choices)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        n = int(math.floor((self.high - self.low) / self.step + 1e-9))
        return [round(self.low + i * self.step, 12) for i in range(n + 1)]

    def contains(self, value) -> bool:
        if self.kind == "categorical":
            return any(value == c and type(value) is type(c) for c in self.choices) or value in self.choices
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind == "int" and not float(value).is_integer():
            return False
        return self.low <= value <= self.high

    def describe(self) -> str:
        if self.kind == "categorical":
            return f"one of {self.choices}"
        text = f"{self.kind} {_num(self.low)}..{_num(self.high)}"
        return text + (" log" if self.log else "") + (f" step {_num(self.step)}" if self.step else "")


@dataclass
class LoadedSweep:
    spec: SweepSpec
    path: Path
    study: str
    base_raw: dict  # the base job as written (before validation): trials copy and modify it
    base_dir: Path  # relative paths in the base job resolve against this
    base: LoadedJob  # the validated base job
    params: list[Param] = field(default_factory=list)
    enqueue: list[dict[str, Any]] = field(default_factory=list)  # flat {'hyp.lr0': 0.002}

    def start_point(self) -> dict[str, Any]:
        """Where `startup: local` searches: the first enqueue point, the other dimensions at the
        base job's own values (hyp: defaults <- preset <- inline; overrides: set or Ultralytics'
        default). A dimension whose base value lies outside the space has no start (drawn at random)."""
        return start_point(self.params, self.enqueue, self.base)

    @property
    def runs_root(self) -> Path:
        return Path(self.base.spec.runs_dir).expanduser().resolve()

    @property
    def sweeps_dir(self) -> Path:
        return self.runs_root / "sweeps"

    @property
    def study_dir(self) -> Path:
        return self.sweeps_dir / self.study


def load_sweep(path: Path, study: str | None = None) -> LoadedSweep:
    """Read, validate and resolve a sweep file. Every problem is a SpecError line naming its field."""
    raw = read_yaml_file(path, "sweep file")
    label = str(path)
    if raw is None:
        raise SpecError(f"{label}: file is empty; expected a mapping with at least `base` and `space`")
    if not isinstance(raw, dict):
        raise SpecError(f"{label}: expected a mapping of sweep fields at the top level (got {type(raw).__name__})")
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        lines = format_pydantic_errors(exc)
        if not isinstance(raw.get("objective"), list):  # one objective: name it `objective.metric`, not `.0.`
            lines = [line.replace("objective.0.", "objective.", 1).replace("objective.0:", "objective:", 1)
                     for line in lines]
        raise SpecError(lines) from None
    sweep_dir = path.resolve().parent
    problems: list[str] = []

    # the base job
    base_raw: dict | None = None
    base_dir = sweep_dir
    prefix = "base."
    if isinstance(spec.base, str):
        base_path = resolve_relative(spec.base, sweep_dir)
        prefix = f"base ({spec.base}): "
        try:
            base_raw = read_yaml_file(base_path, "job file")
        except SpecError as exc:
            raise SpecError([f"base: {line}" for line in exc.problems]) from None
        if not isinstance(base_raw, dict):
            raise SpecError(f"base: {spec.base} must hold a job mapping")
        base_dir = base_path.resolve().parent
    else:
        base_raw = copy.deepcopy(spec.base)
    try:
        base = load_job_dict(copy.deepcopy(base_raw), base_dir=base_dir, label="base")
    except SpecError as exc:
        raise SpecError([f"{prefix}{line}" for line in exc.problems]) from None

    params = []
    for name, ps in spec.space.params().items():
        try:
            params.append(_resolve_param(name, ps))
        except SpecError as exc:
            problems += exc.problems
    if problems:
        raise SpecError(problems)
    problems += _cross_checks(spec, raw)
    problems += _check_auto_optimizer(params, base)
    problems += _check_against_job(params, base_raw, base_dir)
    enqueue, enqueue_problems = _flatten_enqueue(spec.enqueue, params)
    problems += enqueue_problems
    problems += _check_sampler(spec, params, enqueue, base)
    if problems:
        raise SpecError(problems)
    if spec.pruner.name == "median" and spec.pruner.n_warmup_steps is None:
        # Optuna's default (0) ranks trials from epoch 1, where models trained from scratch all
        # score ~0 and the ranking is noise. Measured take-offs: epochs 4-7 of 10 (the sweep
        # benchmark), 11-16 of 35 (the quickstart). Half the trial is a safe default; set it
        # lower once the curves show where they take off (docs/sweeps.md, "Where to prune").
        spec.pruner.n_warmup_steps = base.spec.epochs // 2

    name = study or spec.study or _default_study(path)
    if study is not None:
        if not re.match(NAME_PATTERN, study) or len(study) > 48 or ".." in study:
            raise SpecError(f"--study: '{study}' is not a valid study name (letters, digits, '.', '_', '-'; "
                            "at most 48 characters)")
    return LoadedSweep(spec=spec, path=path.resolve(), study=name, base_raw=base_raw, base_dir=base_dir, base=base,
                       params=params, enqueue=enqueue)


def _default_study(path: Path) -> str:
    from orchestrator.spec.job import sanitize_run_name

    return sanitize_run_name(path.stem)[:48]


def _resolve_param(name: str, ps: ParamSpec) -> Param:
    where = f"space.{name}"
    section, key = name.split(".", 1)
    if section == "overrides":
        bad = check_overrides({key: None}, values=False)
        if bad:
            raise SpecError([line.replace(f"overrides.{key}:", f"{where}:", 1) for line in bad])
    if section == "hyp":
        takes = _hyp_kind(key)
    else:
        default = ultralytics_cfg.default_cfg().get(key)
        takes = {bool: "bool", int: "int", float: "float"}.get(type(default), "any")
    kind = ps.type or ("categorical" if ps.choices is not None else None)
    if kind is None:
        if takes in ("float", "int"):
            kind = takes
        elif takes in ("bool", "choice"):
            raise SpecError(f"{where}: {key} takes {'true/false' if takes == 'bool' else 'names'}; "
                            "give `choices`")
        else:
            raise SpecError(f"{where}: give `type` (float, int) with low/high, or `choices`")
    if kind in ("float", "int") and takes in ("bool", "choice"):
        raise SpecError(f"{where}: {key} is not numeric; give `choices`")
    if kind == "float" and takes == "int":
        raise SpecError(f"{where}: {key} is an integer; use type: int (or leave `type` out)")
    if kind == "int":
        for attr in ("low", "high", "step"):
            v = getattr(ps, attr)
            if v is not None and not float(v).is_integer():
                raise SpecError(f"{where}.{attr}: an int parameter needs whole numbers (got {v})")
        return Param(name, "int", int(ps.low), int(ps.high), ps.log, int(ps.step) if ps.step else None)
    if kind == "categorical":
        return Param(name, "categorical", choices=list(ps.choices))
    return Param(name, "float", float(ps.low), float(ps.high), ps.log, ps.step)


def _check_against_job(params: list[Param], base_raw: dict, base_dir: Path) -> list[str]:
    """Every range end and every choice must make a valid job: checked with the job spec's own rules."""
    problems = []
    for p in params:
        where = f"space.{p.name}"
        probes = ([("choices", c) for c in p.choices] if p.kind == "categorical"
                  else [("low", p.low), ("high", p.high)])
        for i, (attr, value) in enumerate(probes):
            label = f"{where}.choices[{i}]" if attr == "choices" else f"{where}.{attr}"
            if p.section == "hyp":
                try:
                    Hyperparameters.model_validate({p.key: value})
                except ValidationError as exc:
                    problems += [line.replace(f"{p.key}:", f"{label}:", 1) for line in format_pydantic_errors(exc)]
            elif (why := ultralytics_cfg.check_train_arg(p.key, value)) is not None:
                problems.append(f"{label}: {why}")
    return problems


def _cross_checks(spec: SweepSpec, raw: dict) -> list[str]:
    problems = []
    metrics = [o.metric for o in spec.objectives]
    if len(set(metrics)) != len(metrics):
        problems.append(f"objective: the same metric twice in {metrics}")
    if len(metrics) > 1:
        if spec.pruner.name != "none":
            problems.append(f"pruner: Optuna prunes single-objective studies only and this sweep has {len(metrics)} "
                            "objectives; use `pruner: none`")
        if spec.sampler.name == "cmaes":
            problems.append("sampler: cmaes optimises a single objective; use tpe or nsga2 for several")
    return problems


AUTO_IGNORES = ("lr0", "momentum", "warmup_bias_lr")  # optimizer=auto picks its own (domain brief §1)


def _check_auto_optimizer(params: list[Param], base: LoadedJob) -> list[str]:
    """Ultralytics' optimizer=auto discards lr0 and momentum: sampling them would be a silent no-op."""
    names = {p.name for p in params}
    if "hyp.optimizer" in names or resolve_hyp(base).get("optimizer") != "auto":
        return []
    return [f"space.hyp.{key}: the base job's optimizer is 'auto', which ignores {key} (Ultralytics picks its own); "
            "pin hyp.optimizer in the base job (e.g. SGD or AdamW) or sample it"
            for key in AUTO_IGNORES if f"hyp.{key}" in names]


def _check_sampler(spec: SweepSpec, params: list[Param], enqueue: list[dict], base: LoadedJob) -> list[str]:
    if spec.sampler.name == "grid":
        return [f"space.{p.name}: the grid sampler needs finite values: give `step` or `choices`"
                for p in params if p.grid() is None]
    if spec.sampler.startup == "local" and not start_point(params, enqueue, base):
        return ["sampler.startup: `local` searches near a start, but no dimension of the space has one: "
                "add an `enqueue:` point, or set the base job's values inside the space"]
    return []


def start_point(params: list[Param], enqueue: list[dict], base: LoadedJob) -> dict[str, Any]:
    first = enqueue[0] if enqueue else {}
    hyp = resolve_hyp(base)
    defaults = ultralytics_cfg.default_cfg()
    out = {}
    for p in params:
        if p.name in first:
            value = first[p.name]
        elif p.section == "hyp":
            value = hyp.get(p.key)
        else:
            value = base.spec.overrides.get(p.key, defaults.get(p.key))
        if value is not None and p.contains(value):
            out[p.name] = value
    return out


def _flatten_enqueue(entries: list[dict], params: list[Param]) -> tuple[list[dict], list[str]]:
    by_name = {p.name: p for p in params}
    out, problems = [], []
    for i, entry in enumerate(entries):
        flat = {}
        for section, values in entry.items():
            if section not in ("hyp", "overrides") or not isinstance(values, dict):
                problems.append(f"enqueue[{i}].{section}: expected `hyp:` or `overrides:` mappings of sampled values")
                continue
            for key, value in values.items():
                name = f"{section}.{key}"
                p = by_name.get(name)
                if p is None:
                    problems.append(f"enqueue[{i}].{name}: not in the search space")
                elif not p.contains(value):
                    problems.append(f"enqueue[{i}].{name}: {value!r} is outside space.{name} ({p.describe()})")
                else:
                    flat[name] = value
        out.append(flat)
    return out, problems
