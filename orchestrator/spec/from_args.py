"""`yolo-orch train key=value ...`: the job an Ultralytics command line means.

Ultralytics users type `yolo train model=yolo11n.pt data=data.yaml epochs=100 batch=64 device=0,1,2,3
lr0=0.02`. The same words become a job spec: the keys of Ultralytics' default config with their
own names, values read as Ultralytics reads them (`smart_value`), the command's own hardware as
both the target and the reference (the values were chosen for it, so the scaler changes nothing
and says so), hyperparameters under `hyp:`, every other train argument under `overrides:`.
No torch: the keys come from Ultralytics' default.yaml on disk.
"""

from __future__ import annotations

import ast
import difflib
from typing import Any

from orchestrator.devices import visible_gpus
from orchestrator.spec import ultralytics_cfg
from orchestrator.spec.errors import SpecError
from orchestrator.spec.job import Hyperparameters

TOP_LEVEL = ("task", "model", "data", "epochs", "imgsz", "seed", "deterministic")
REFUSED = {"resume": "continue a run with `yolo-orch resume RUN`", "mode": "this command trains",
           "cfg": "give the keys themselves, or a job file to `yolo-orch submit`"}
IGNORED = ("exist_ok",)  # every run gets its own folder


def smart_value(text: str) -> Any:
    """A value as Ultralytics' `smart_value` reads it: none/true/false by name, a Python literal, else text."""
    lowered = text.lower()
    if lowered == "none":
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def parse_pairs(args: list[str]) -> dict[str, Any]:
    """`key=value` words -> {key: value}; one line per word that is not an Ultralytics argument."""
    known = ultralytics_cfg.default_cfg()
    pairs, problems = {}, []
    for word in args:
        key, sep, text = word.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not key:
            problems.append(f"{word}: expected key=value, as `yolo train` takes them (e.g. epochs=10)")
        elif key not in known:
            close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)
            similar = f"; similar arguments are i.e. {[f'{k}={known[k]}' for k in close]}" if close else ""
            problems.append(f"{key}: not a valid YOLO argument{similar}")
        elif key in REFUSED:
            problems.append(f"{key}: not taken here; {REFUSED[key]}")
        else:
            pairs[key] = smart_value(text.strip())
    if problems:
        raise SpecError(problems)
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


def job_from_args(args: list[str]) -> dict[str, Any]:
    """The raw job dict (validated later as any job file is) that `yolo train` ARGS means."""
    pairs = parse_pairs(args)
    missing = [f"{k}: required, as `yolo train` needs it (e.g. {k}={ex})"
               for k, ex in (("model", "yolo11n.yaml"), ("data", "data.yaml")) if pairs.get(k) in (None, "")]
    if missing:
        raise SpecError(missing)
    device = device_text(pairs.pop("device", None))
    name = str(pairs.pop("name", None) or "train")
    job: dict[str, Any] = {"name": name, **{k: pairs.pop(k) for k in TOP_LEVEL if k in pairs}}
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
    overrides = {k: v for k, v in pairs.items() if k not in IGNORED}
    if overrides:
        job["overrides"] = overrides
    return job
