"""`yolo-orch train key=value ...`: the job an Ultralytics command line means.

Ultralytics users type `yolo train model=yolo11n.pt data=data.yaml epochs=100 batch=64 device=0,1,2,3
lr0=0.02`. The same words become a job spec: the keys of Ultralytics' default config with their
own names, values read as Ultralytics reads them (`smart_value`), the command's own hardware as
both the target and the reference (the values were chosen for it, so the scaler changes nothing
and says so), hyperparameters under `hyp:`, every other train argument under `overrides:`.
No torch: the keys come from Ultralytics' default.yaml on disk.
"""

from __future__ import annotations

from typing import Any

from orchestrator.devices import visible_gpus
from orchestrator.errors import UserError
from orchestrator.jobspec.ndjson import SUFFIXES as NDJSON_SUFFIXES
from orchestrator.jobspec.job import Hyperparameters
from orchestrator.jobspec.yolo_cli import parse_words

TOP_LEVEL = ("task", "model", "data", "epochs", "imgsz", "seed", "deterministic")
REFUSED = {"resume": "continue a run with `yolo-orch resume RUN`"}
IGNORED = {"exist_ok": "every run gets its own folder"}


def parse_pairs(args: list[str], notes: list[str] | None = None) -> dict[str, Any]:
    """Ultralytics' command-line words -> {key: value} (jobspec/yolo_cli.py); one line per word it would
    refuse, or that this command does not take. `notes` collects what was repaired or ignored."""
    words = parse_words(args)
    pairs = words.pairs
    problems = [f"{key}: not taken here; {why}" for key, why in REFUSED.items() if key in pairs]
    mode = pairs.pop("mode", "train")
    if mode != "train":
        problems.append(f"mode: {mode!r}: yolo-orch train trains; `yolo {mode}` runs Ultralytics' {mode} mode")
    if problems:
        raise UserError(problems)
    words.notes += [f"{key}={pairs.pop(key)} ignored: {why}" for key, why in IGNORED.items() if key in pairs]
    if notes is not None:
        notes += words.notes
    return pairs


def default_device() -> str:
    """Ultralytics' empty `device`: the first GPU when there is one, else the CPU."""
    return "0" if visible_gpus() else "cpu"


def device_text(value: Any) -> str:
    """Ultralytics' `device` value as a device spec: `0,1,2,3` reads as a tuple and `[0,1]` as a
    list (both GPU lists), `0` is GPU 0 (not "not given"); empty or none is Ultralytics' default."""
    if value is None or value == "":
        return default_device()
    if isinstance(value, (list, tuple)):
        return ",".join(str(v).strip() for v in value)
    text = str(value).replace(" ", "")
    return "cpu" if text.lower() == "cpu" else text


def data_source(data: Any) -> Any:
    """`data=`: an NDJSON file (which Ultralytics trains from, converting it in every process) is the job's
    `data: {ndjson: ...}`, read and converted once; a COCO JSON file has no `yolo train` word (a COCO export
    is a job's `data: {coco: ...}`, or a YOLO folder by `yolo-orch data import`); anything else is a data.yaml."""
    text = str(data)
    if text.lower().endswith(NDJSON_SUFFIXES):
        return {"ndjson": text}
    if text.lower().endswith(".json"):
        raise UserError(f"data: {text} is JSON: a COCO export trains from a job file (data: {{coco: {{train: ..., val: "
                        "..., images: ...}}) or as a YOLO dataset from `yolo-orch data import`; `yolo train` names "
                        "a data.yaml or an .ndjson file")
    return data


def job_from_args(args: list[str], notes: list[str] | None = None) -> dict[str, Any]:
    """The raw job dict (validated later as any job file is) that `yolo train` ARGS means; `notes`
    collects Ultralytics' warnings for words it repairs (spaces around '=', dashes, commas)."""
    pairs = parse_pairs(args, notes)
    missing = [f"{k}: required, as `yolo train` needs it (e.g. {k}={ex})"
               for k, ex in (("model", "yolo11n.yaml"), ("data", "data.yaml")) if pairs.get(k) in (None, "")]
    if missing:
        raise UserError(missing)
    device = device_text(pairs.pop("device", None))
    name = str(pairs.pop("name", None) or "train")
    job: dict[str, Any] = {"name": name, **{k: pairs.pop(k) for k in TOP_LEVEL if k in pairs}}
    job["data"] = data_source(job["data"])
    if "project" in pairs:
        job["runs_dir"] = str(pairs.pop("project"))
    reference: dict[str, Any] = {"devices": device}
    target: dict[str, Any] = {"devices": device}
    if "batch" in pairs:
        reference["batch"] = target["batch"] = pairs.pop("batch")
    if "nbs" in pairs:
        reference["nbs"] = pairs.pop("nbs")
    job.update(reference=reference, target=target)
    hyp_keys = set(Hyperparameters.model_fields)
    hyp = {k: pairs.pop(k) for k in list(pairs) if k in hyp_keys}
    if hyp:
        job["hyp"] = hyp
    overrides = dict(pairs)
    if overrides:
        job["overrides"] = overrides
    return job
