"""Load a job file into a validated JobSpec: YAML, --set overrides, Pydantic, then
the checks that look at the filesystem (model, data, hyp preset, override keys)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator.tasks import EXAMPLE_MODELS, TASKS
from orchestrator.jobspec import ultralytics_cfg
from orchestrator.jobspec import dataset
from orchestrator.errors import UserError
from orchestrator.jobspec.errors import format_pydantic_errors
from orchestrator.jobspec.job import HypBlock, Hyperparameters, JobSpec, hyp_block
from orchestrator.jobspec.files import read_regular_bounded
from orchestrator.jobspec.yamlio import parse_yaml_text, read_yaml_file

REPO_ROOT = Path(__file__).resolve().parents[2]
PRESET_DIRS = (Path("hyp"), REPO_ROOT / "hyp")

# Train arguments the spec owns: setting them in `overrides` would bypass the scaler or the run layout.
OWNED_BY_SPEC = {
    "model": "model", "data": "data", "epochs": "epochs", "imgsz": "imgsz", "seed": "seed",
    "deterministic": "deterministic", "batch": "target.batch", "nbs": "reference.nbs",
    "device": "target.devices", "project": "runs_dir", "name": "name", "exist_ok": None,
    "mode": None, "task": "task", "resume": "`yolo-orch resume`", "cfg": None,
}


@dataclass
class LoadedJob:
    spec: JobSpec
    path: Path | None  # the job file, None for inline jobs (sweeps)
    base_dir: Path  # relative paths in the job resolve against this

    def resolve_path(self, value: str) -> Path:
        return resolve_relative(value, self.base_dir)


def resolve_relative(value: str, base_dir: Path) -> Path:
    p = Path(value).expanduser()
    if p.is_absolute():
        return p
    beside = base_dir / p
    return beside if beside.exists() or not p.exists() else p.resolve()


def parse_set_options(items: list[str]) -> list[tuple[list[str], Any]]:
    """`--set a.b=VALUE` pairs; VALUE is parsed as YAML (so 0.01, true, [1,2] work)."""
    out, problems = [], []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            problems.append(f"--set {item}: expected KEY=VALUE, e.g. --set epochs=10 or --set hyp.lr0=0.01")
            continue
        try:
            value = parse_yaml_text(raw, f"--set {key}") if raw.strip() else ""
        except UserError as exc:
            problems.extend(exc.problems)
            continue
        out.append((key.split("."), value))
    if problems:
        raise UserError(problems)
    return out


def apply_sets(raw: dict, sets: list[tuple[list[str], Any]]) -> dict:
    for path, value in sets:
        node = raw
        for part in path[:-1]:
            child = node.get(part)
            if child is None or isinstance(child, str) and part == "hyp":
                child = {} if child is None else {"preset": child}
                node[part] = child
            if not isinstance(child, dict):
                raise UserError(f"--set {'.'.join(path)}: '{part}' is not a mapping in this job")
            node = child
        node[path[-1]] = value
    return raw


def load_job(path: Path, sets: list[str] = (), devices: str | None = None) -> LoadedJob:
    raw = read_yaml_file(path, "job file")
    return load_job_dict(raw, base_dir=path.resolve().parent, label=str(path), sets=sets, devices=devices, path=path)


def load_job_dict(
    raw: Any, base_dir: Path, label: str = "job", sets: list[str] = (), devices: str | None = None, path=None
) -> LoadedJob:
    if raw is None:
        raise UserError(f"{label}: file is empty; expected a mapping with at least `name` and `data`")
    if not isinstance(raw, dict):
        raise UserError(f"{label}: expected a mapping of job fields at the top level (got {type(raw).__name__})")
    raw = apply_sets(dict(raw), parse_set_options(list(sets)))
    if devices is not None:
        raw["target"] = dict(raw.get("target") or {}, devices=devices)
    try:
        spec = JobSpec.model_validate(raw)
    except ValidationError as exc:
        raise UserError([_with_home(line) for line in format_pydantic_errors(exc)]) from None
    job = LoadedJob(spec=spec, path=path, base_dir=base_dir)
    problems = check_model(job)  # first: it sets the task a job left out, which the data check reads
    problems += check_data(job) + check_overrides(spec.overrides) + check_pretrained(job)
    try:
        resolve_hyp(job)
    except UserError as exc:
        problems += exc.problems
    if problems:
        raise UserError(problems)
    return job


# Ultralytics argument names users write at the top level, and where a job spec keeps them.
TOP_LEVEL_HOMES = {"batch": "target.batch", "device": "target.devices", "devices": "target.devices",
                   "nbs": "reference.nbs", "policy": "scaling.policy", "project": "runs_dir"}


def _with_home(line: str) -> str:
    """`lr0: unknown key` -> `lr0: unknown key; in a job spec it is hyp.lr0` (and the like for the
    Ultralytics arguments people bring from `yolo train`)."""
    key, sep, rest = line.partition(": ")
    if rest != "unknown key" or "." in key:
        return line
    if key in TOP_LEVEL_HOMES:
        home = TOP_LEVEL_HOMES[key]
    elif key in Hyperparameters.model_fields:
        home = f"hyp.{key}"
    elif key in ultralytics_cfg.default_cfg():
        home = f"overrides.{key}"
    else:
        return line + ultralytics_cfg.suggest(key, JobSpec.model_fields)
    return f"{line}; in a job spec it is `{home}`"


def check_model(job: LoadedJob) -> list[str]:
    """The model must be a local file or an Ultralytics yaml (weights are never downloaded), and build
    the job's task; a job without `task` takes the model's (set here, so every layer sees one task)."""
    model = job.spec.model
    family = other_family(model)
    if family:
        return [f"model: {Path(model).name} is {family} model, which Ultralytics trains with its own class, not YOLO's "
                f"trainers; yolo-orch trains YOLO models (e.g. {EXAMPLE_MODELS['detect']})"]
    local = job.resolve_path(model)
    built = None
    why = weights_problem(local) if local.is_file() and model.endswith(".pt") else None
    if why:
        return [f"model: {local} is not a PyTorch weights file ({why})"]
    if local.is_file():
        built = ultralytics_cfg.model_yaml_task(local) if model.endswith((".yaml", ".yml")) else \
            ultralytics_cfg.weights_task(local) if model.endswith(".pt") else None
    elif model.endswith((".yaml", ".yml")):
        found = ultralytics_cfg.find_model_yaml(Path(model).name)
        if found is None or Path(model).name != model:
            return [f"model: unknown model yaml '{model}' (not a local file nor an Ultralytics config)"
                    f"{ultralytics_cfg.suggest_model(Path(model).name)}"]
        built = ultralytics_cfg.model_yaml_task(found)
    elif model.endswith(".pt"):
        return [f"model: weights file '{model}' not found, and weights are never downloaded (offline by design): put "
                f"the file at {local} (or give its path), or build from '{Path(model).stem}.yaml'"]
    else:
        return [f"model: expected a model yaml (e.g. yolo11n.yaml) or a local .pt file (got '{model}')"]
    return _check_model_task(job, built)


def other_family(model: str) -> str | None:
    """The model family Ultralytics' entrypoint routes to another class than YOLO, by its file name
    (`ultralytics.cfg.entrypoint`: RTDETR, FastSAM, SAM, NAS), or None."""
    stem = Path(model).stem.lower()
    if "rtdetr" in stem:
        return "an RT-DETR"
    if "fastsam" in stem:
        return "a FastSAM"
    if any(k in stem for k in ("sam_", "sam2_", "sam2.1_", "sam3", "mobile_sam")):
        return "a SAM"
    return "a YOLO-NAS" if "yolo_nas" in stem else None


def _check_model_task(job: LoadedJob, built: str | None) -> list[str]:
    """A model of one task (segment, pose, obb, classify, semantic, depth) under another would build or load
    the wrong head."""
    task = job.spec.task
    if built is not None and built not in TASKS:  # a task of a later Ultralytics this tool does not know
        return [f"model: {job.spec.model} is a {built} model; yolo-orch trains {', '.join(TASKS)} models"]
    if task is None:
        job.spec.task = built or annotations_task(job) or "detect"  # Ultralytics' own default: detect
        return []
    if built is None or built == task:
        return []
    return [f"model: {job.spec.model} is a {built} model, but the job's task is {task} (leave `task` out to "
            f"train the model's own task, or give a {task} model such as {EXAMPLE_MODELS[task]})"]


def annotations_task(job: LoadedJob) -> str | None:
    """Where the model does not say its task (a yaml whose head Ultralytics does not name), a COCO export's or
    an NDJSON file's annotations do: keypoints pose, polygons or masks segment, boxes detect; NDJSON's own
    task field. None for other data, or data that cannot be read (the plan names its problems)."""
    data = job.spec.data
    try:
        if not isinstance(data, str) and data.ndjson is not None:
            from orchestrator.jobspec.ndjson import dataset_task

            return dataset_task(job.resolve_path(data.ndjson))
        if not isinstance(data, str) and data.coco is not None:
            from orchestrator.jobspec.coco import coco_splits, read_coco

            return read_coco(coco_splits(job)).task
    except UserError:
        return None
    return None


WEIGHTS_MAGIC = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive; a legacy pickle (protocol 2 and later)


def weights_problem(path: Path) -> str | None:
    """Why `path` is no file Ultralytics can load weights from (unreadable, not a torch.save checkpoint),
    or None."""
    raw, why = read_regular_bounded(str(path), 4)
    if raw is None or not raw.startswith(WEIGHTS_MAGIC):
        return why or "not a torch.save checkpoint"
    return None


def check_pretrained(job: LoadedJob) -> list[str]:
    """`overrides.pretrained` as a path: a local weights file Ultralytics can load (it would download
    a missing one, or die mid-run reading /etc/passwd as a checkpoint). true/false are flags."""
    value = job.spec.overrides.get("pretrained")
    if not isinstance(value, str) or value.lower() in ("true", "false"):
        return []
    path = job.resolve_path(value)
    if not path.is_file():
        return [f"overrides.pretrained: weights file '{value}' not found, and weights are never downloaded (offline "
                f"by design): put the file at {path}, or set pretrained: false"]
    why = weights_problem(path)
    return [f"overrides.pretrained: {path} is not a PyTorch weights file ({why})"] if why else []


COCO_TASKS = ("detect", "segment", "pose")


def check_data(job: LoadedJob) -> list[str]:
    data = job.spec.data
    if not isinstance(data, str) and data.ndjson is not None:  # read and checked with the plan (describe_ndjson)
        path = job.resolve_path(data.ndjson)
        return [] if path.is_file() else [f"data.ndjson: '{data.ndjson}' not found ({path})"]
    if not isinstance(data, str) and data.coco is not None:  # read and checked with the plan (job_data.describe_coco)
        if job.spec.task not in COCO_TASKS:
            return [f"data.coco: COCO annotations train {', '.join(COCO_TASKS)} models; a {job.spec.task} model needs "
                    "its own dataset format (docs/tasks.md)"]
        return []
    if not isinstance(data, str):  # synth: generated on first use
        synth = data.synth
        if job.spec.task == "classify" and min(synth.images, synth.val_images) < synth.classes:
            return [f"data.synth: a classify dataset needs at least one image per class in each split ({synth.classes} "
                    f"classes; images {synth.images}, val_images {synth.val_images})"]
        return []
    path = job.resolve_path(data)
    if job.spec.task == "classify":
        if path.is_dir():
            return []  # its folders are read with the images (dataset.scan_folders, job_data.describe_data)
        return [f"data: a classify dataset is a folder with train/ and val/, one folder per class in each; "
                f"'{data}' is {'a file' if path.exists() else 'not found'}"]
    if not path.is_file():
        return [f"data: dataset yaml '{data}' not found"]
    try:
        cfg = read_yaml_file(path, "dataset yaml")
    except UserError as exc:
        return [f"data: {line}" for line in exc.problems]
    if not isinstance(cfg, dict):
        return [f"data: {data} must be a mapping with train, val and names"]
    return dataset.check_yaml(cfg, path.resolve(), data, job.spec.task)


def check_overrides(overrides: dict, values: bool = True) -> list[str]:
    """Each override key must be an Ultralytics train argument the spec does not own; with `values`,
    its value must pass Ultralytics' own argument check (ultralytics_cfg.check_train_arg)."""
    known = ultralytics_cfg.default_cfg()
    hyp_keys = set(Hyperparameters.model_fields)
    problems = []
    for key in overrides:
        if key in hyp_keys:
            problems.append(f"overrides.{key}: a hyperparameter; set it under `hyp:` so the scaler sees it")
        elif key in OWNED_BY_SPEC:
            where = OWNED_BY_SPEC[key]
            hint = f"; set `{where}` instead" if where else "; the orchestrator sets it"
            problems.append(f"overrides.{key}: not allowed here{hint}")
        elif key not in known:
            problems.append(f"overrides.{key}: not an Ultralytics train argument{ultralytics_cfg.suggest(key, known)}")
        elif values and (why := ultralytics_cfg.check_train_arg(key, overrides[key])) is not None:
            problems.append(f"overrides.{key}: {why}")
    return problems


def find_preset(name: str, base_dir: Path) -> Path | None:
    candidates = [resolve_relative(name, base_dir)]
    if not name.endswith((".yaml", ".yml")):
        candidates += [d / f"{name}.yaml" for d in PRESET_DIRS]
    return next((c for c in candidates if c.is_file()), None)


def available_presets() -> list[str]:
    names = set()
    for d in PRESET_DIRS:
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def load_preset(name: str, base_dir: Path) -> dict:
    path = find_preset(name, base_dir)
    if path is None:
        raise UserError(f"hyp: preset '{name}' not found (known: {', '.join(available_presets()) or 'none'})"
                        f"{ultralytics_cfg.suggest(name, available_presets())}")
    raw = read_yaml_file(path, "hyp preset")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(f"hyp: preset {path} must be a mapping of hyperparameters")
    try:
        return Hyperparameters.model_validate(raw).values()
    except ValidationError as exc:
        raise UserError(format_pydantic_errors(exc, prefix=f"hyp ({path.name})")) from None


def resolve_hyp(job: LoadedJob) -> dict[str, Any]:
    """Final hyperparameters: Ultralytics defaults <- preset <- inline values."""
    defaults = ultralytics_cfg.default_cfg()
    block: HypBlock = hyp_block(job.spec)
    values = {k: defaults[k] for k in Hyperparameters.model_fields if k in defaults}
    if block.preset:
        values.update(load_preset(block.preset, job.base_dir))
    values.update(block.values())
    values.pop("preset", None)
    return values
