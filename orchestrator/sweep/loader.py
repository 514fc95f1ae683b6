"""Load a sweep file: `load_sweep()` validates it (sweep/config.py), validates the base job and
checks every range end and choice against the job spec, so a bad sweep fails before anything runs
(UserError lines naming the field, exit 2). `Param` is one resolved search dimension."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator import tasks
from orchestrator.jobspec import ultralytics_cfg
from orchestrator.errors import UserError
from orchestrator.jobspec.errors import format_pydantic_errors
from orchestrator.jobspec.job import Hyperparameters
from orchestrator.jobspec.loader import LoadedJob, check_overrides, load_job_dict, resolve_hyp, resolve_relative
from orchestrator.jobspec.yamlio import read_yaml_file
from orchestrator.sweep.config import STUDY_NAME, STUDY_RULE, ParamSpec, SweepSpec, hyp_kind, num_text


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

    def grid_size(self) -> int | None:
        """How many values `grid()` holds, counted without building it (None: continuous)."""
        if self.kind == "categorical":
            return len(self.choices)
        if self.kind == "int":
            return len(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        return int(math.floor((self.high - self.low) / self.step + 1e-9)) + 1

    def grid(self) -> list | None:
        """The finite values of this dimension, for the grid sampler (None: continuous)."""
        size = self.grid_size()
        if size is None or self.kind == "categorical":
            return None if size is None else list(self.choices)
        step = int(self.step or 1) if self.kind == "int" else self.step
        if self.kind == "int":
            return [int(self.low) + i * step for i in range(size)]
        return [round(self.low + i * step, 12) for i in range(size)]

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
        text = f"{self.kind} {num_text(self.low)}..{num_text(self.high)}"
        return text + (" log" if self.log else "") + (f" step {num_text(self.step)}" if self.step else "")


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
    """Read, validate and resolve a sweep file. Every problem is a UserError line naming its field."""
    raw = read_yaml_file(path, "sweep file")
    label = str(path)
    if raw is None:
        raise UserError(f"{label}: file is empty; expected a mapping with at least `base` and `space`")
    if not isinstance(raw, dict):
        raise UserError(f"{label}: expected a mapping of sweep fields at the top level (got {type(raw).__name__})")
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        lines = format_pydantic_errors(exc)
        if not isinstance(raw.get("objective"), list):  # one objective: name it `objective.metric`, not `.0.`
            lines = [line.replace("objective.0.", "objective.", 1).replace("objective.0:", "objective:", 1)
                     for line in lines]
        raise UserError(lines) from None
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
        except UserError as exc:
            raise UserError([f"base: {line}" for line in exc.problems]) from None
        if not isinstance(base_raw, dict):
            raise UserError(f"base: {spec.base} must hold a job mapping")
        base_dir = base_path.resolve().parent
    else:
        base_raw = copy.deepcopy(spec.base)
    try:
        base = load_job_dict(copy.deepcopy(base_raw), base_dir=base_dir, label="base")
    except UserError as exc:
        raise UserError([f"{prefix}{line}" for line in exc.problems]) from None

    params = []
    for name, ps in spec.space.params().items():
        try:
            params.append(_resolve_param(name, ps))
        except UserError as exc:
            problems += exc.problems
    if problems:
        raise UserError(problems)
    problems += _cross_checks(spec, raw)
    problems += _check_metrics_of_task(spec, base.spec.task)
    problems += _check_auto_optimizer(params, base)
    problems += _check_against_job(params, base_raw, base_dir)
    enqueue, enqueue_problems = _flatten_enqueue(spec.enqueue, params)
    problems += enqueue_problems
    problems += _check_sampler(spec, params, enqueue, base)
    if problems:
        raise UserError(problems)
    if spec.pruner.name == "median" and spec.pruner.n_warmup_steps is None:
        # Optuna's default (0) ranks trials from epoch 1, where models trained from scratch all
        # score ~0 and the ranking is noise. Measured take-offs: epochs 4-7 of 10 (the sweep
        # benchmark), 11-16 of 35 (the quickstart). Half the trial is a safe default; set it
        # lower once the curves show where they take off (docs/sweeps.md, "Where to prune").
        spec.pruner.n_warmup_steps = base.spec.epochs // 2

    name = study or spec.study or _default_study(path)
    if study is not None:
        if not STUDY_NAME.fullmatch(study) or ".." in study:
            raise UserError(f"--study: '{study[:60]}' is not a valid study name ({STUDY_RULE})")
    return LoadedSweep(spec=spec, path=path.resolve(), study=name, base_raw=base_raw, base_dir=base_dir, base=base,
                       params=params, enqueue=enqueue)


def _default_study(path: Path) -> str:
    """The sweep file's name as a study name. Letters a name cannot hold (`学習.yaml`, `süß.yaml`) are
    replaced, and a short digest of the whole name keeps two such files in two studies."""
    import hashlib

    from orchestrator.jobspec.job import sanitize_run_name

    name = sanitize_run_name(path.stem)[:48]
    if name == path.stem[:48]:
        return name
    digest = hashlib.sha1(path.stem.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{name[:39].rstrip('.-')}-{digest}" if name != "run" else f"sweep-{digest}"


def _resolve_param(name: str, ps: ParamSpec) -> Param:
    where = f"space.{name}"
    section, key = name.split(".", 1)
    if section == "overrides":
        bad = check_overrides({key: None}, values=False)
        if bad:
            raise UserError([line.replace(f"overrides.{key}:", f"{where}:", 1) for line in bad])
    if section == "hyp":
        takes = hyp_kind(key)
    else:
        default = ultralytics_cfg.default_cfg().get(key)
        takes = {bool: "bool", int: "int", float: "float"}.get(type(default), "any")
    kind = ps.type or ("categorical" if ps.choices is not None else None)
    if kind is None:
        if takes in ("float", "int"):
            kind = takes
        elif takes in ("bool", "choice"):
            raise UserError(f"{where}: {key} takes {'true/false' if takes == 'bool' else 'names'}; "
                            "give `choices`")
        else:
            raise UserError(f"{where}: give `type` (float, int) with low/high, or `choices`")
    if kind in ("float", "int") and takes in ("bool", "choice"):
        raise UserError(f"{where}: {key} is not numeric; give `choices`")
    if kind == "float" and takes == "int":
        raise UserError(f"{where}: {key} is an integer; use type: int (or leave `type` out)")
    if kind == "int":
        for attr in ("low", "high", "step"):
            v = getattr(ps, attr)
            if v is not None and not float(v).is_integer():
                raise UserError(f"{where}.{attr}: an int parameter needs whole numbers (got {v})")
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


def _check_metrics_of_task(spec: SweepSpec, task: str) -> list[str]:
    """A metric the base job's task never reports would leave every trial without a value."""
    known = tasks.metric_keys(task)
    return [f"objective: {o.metric} is not reported by task {task} (its metrics: fitness, "
            f"{', '.join(tasks.METRICS[task])}, and the losses {', '.join(tasks.LOSSES[task])})"
            for o in spec.objectives if o.metric != "fitness" and o.metric not in known]


AUTO_IGNORES = ("lr0", "momentum", "warmup_bias_lr")  # optimizer=auto picks its own (domain brief §1)


MAX_GRID_POINTS = 100_000


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
        return _check_grid(params)
    if spec.sampler.startup == "local" and not start_point(params, enqueue, base):
        return ["sampler.startup: `local` searches near a start, but no dimension of the space has one: "
                "add an `enqueue:` point, or set the base job's values inside the space"]
    return []


def _check_grid(params: list[Param]) -> list[str]:
    """Every dimension finite, and the whole grid at most MAX_GRID_POINTS (Optuna's GridSampler builds
    the product as a list: 1e9 points would fill the memory before the first trial)."""
    sizes = {p.name: p.grid_size() for p in params}
    problems = [f"space.{name}: the grid sampler needs finite values: give `step` or `choices`"
                for name, size in sizes.items() if size is None]
    if problems:
        return problems
    total = math.prod(sizes.values())
    if total > MAX_GRID_POINTS:
        biggest = max(sizes, key=sizes.get)
        return [f"space.{biggest}: the grid would have {total:,} points ({biggest}: {sizes[biggest]:,} values); at "
                f"most {MAX_GRID_POINTS:,}: give a larger `step`, fewer `choices`, or another sampler"]
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
