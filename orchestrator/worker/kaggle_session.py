"""One Kaggle session of a job, inside the kernel (after the runner installed the wheels):

    python -m orchestrator.worker.kaggle_session --bundle B.json --run-dir DIR --deadline EPOCH_S
        [--input-root /kaggle/input] [--scratch DIR] [--resume]

Prepares the data (synth: generated here; a data yaml: its Kaggle dataset found by glob
under the input root), writes the run's job.resolved.yaml (with the session's `deadline`, and
its `resume` section when it continues an earlier session), trains through the XLA launcher's
own entry (`orchestrator.worker.xla_entry.train`: one process, SPMD over the TPU cores), which
writes events.jsonl and summary.json as on any machine, and adds resume.json. The runner
script tars the run directory into /kaggle/working.

resume.json: {job, run_id, epochs, epochs_done, done, state: finished|paused|failed, reason,
metrics}. `paused` = stopped at an epoch boundary before the session limit; the next session
(kernel_sources = this one) restores the run and resumes from weights/session_resume.pt.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from orchestrator.errors import EnvError
from orchestrator.rundir import (EVENTS, LAST, SESSION_RESUME, SUMMARY, XLA_COMPILE_CACHE, EventWriter, ResolvedRun,
                                 ResumeOrder, completed_epochs, dump_yaml, parse_resolved, write_json_atomic,
                                 write_text_atomic)

RESUME_FILE = "resume.json"


class SessionError(EnvError):
    """The Kaggle session cannot prepare its run (its bundle, data or checkpoint): one line, the session fails."""


def log(msg: str) -> None:
    print(f"[yolo-orch] {msg}", flush=True)


# ---------------------------------------------------------------- data and model

def find_dirs(root: Path, name: str, max_depth: int = 4) -> list[Path]:
    out: list[Path] = []
    for depth in range(max_depth):
        out += [p for p in sorted(root.glob("/".join(["*"] * depth + [name]))) if p.is_dir()]
    return out


def _entries(cfg: dict) -> list[str]:
    out = []
    for key in ("train", "val"):
        value = cfg.get(key)
        out += [str(v) for v in (value if isinstance(value, list) else [value]) if v]
    return out


def locate_dataset_root(input_root: Path, dataset: str, cfg: dict) -> Path:
    """The folder under the input root that holds the yaml's train/val entries: inside a folder
    named like the dataset's slug when there is one (mounts: /kaggle/input/<slug>/,
    /kaggle/input/datasets/<owner>/<slug>/, ...), else anywhere a few levels down."""
    slug = dataset.split("/")[-1]
    entries = _entries(cfg)
    starts = find_dirs(input_root, slug) or [input_root]
    for start in starts:
        for depth in range(4):
            for base in [start] if depth == 0 else sorted(start.glob("/".join(["*"] * depth))):
                if base.is_dir() and all((base / e).exists() for e in entries):
                    return base
    seen = ", ".join(str(p) for p in starts[:5])
    raise SessionError(f"data: no folder under {input_root} holds {', '.join(entries)} (dataset {dataset}; looked in "
                       f"{seen}); is the dataset attached to the kernel (dataset_sources)?")


def prepare_data(bundle: dict, input_root: Path, scratch: Path) -> Path:
    data = bundle["data"]
    if data["kind"] == "synth":
        from orchestrator.data.synth import generate_dataset

        cfg = data["synth"]
        digest = hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:12]
        folder = scratch / "datasets" / f"synth-{digest}"
        if not (folder / "data.yaml").is_file():
            log(f"generating the synthetic dataset ({cfg['images']} train / {cfg['val_images']} val images) in {folder}")
            generate_dataset(folder, images=cfg["images"], val_images=cfg["val_images"], classes=cfg["classes"],
                             imgsz=cfg["imgsz"], seed=cfg["seed"])
        return folder / "data.yaml"
    cfg = dict(data["config"])
    root = locate_dataset_root(input_root, data["dataset"], cfg)
    cfg["path"] = str(root)
    out = scratch / "data" / data["yaml_name"]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, dump_yaml(cfg))
    log(f"data: {data['dataset']} found at {root}")
    return out


def prepare_model(bundle: dict, scratch: Path) -> str:
    model = bundle["model"]
    if "text" not in model:
        return model["name"]
    path = scratch / "models" / model["name"]
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, model["text"])
    return str(path)


# ---------------------------------------------------------------- progress

def write_resume_state(run_dir: Path, bundle: dict, **fields: Any) -> dict:
    state = {"format": 1, "job": bundle["job_name"], "run_id": bundle["run_id"], "epochs": bundle["epochs"],
             "kernel": bundle["kernel"], "session": bundle["session"]}
    state.update(fields)
    write_json_atomic(run_dir / RESUME_FILE, state)
    return state


def session_resolved(bundle: dict, run_dir: Path, deadline: float, input_root: Path, scratch: Path,
                     resume: bool) -> ResolvedRun:
    """This session's job.resolved.yaml: the bundle's plan with this kernel's data and model paths,
    the session's deadline and W&B mode, the compile cache inside the run (it travels to the next
    session with it) and, when resuming, the checkpoint the previous session kept at its deadline."""
    resolved = parse_resolved(json.loads(json.dumps(bundle["resolved"])), "the kernel's bundle")
    mode = bundle.get("wandb_mode", "disabled")
    if mode != "disabled" and importlib.util.find_spec("wandb") is None:
        log("WARNING: wandb is not installed (not in the wheels dataset?): W&B disabled for this session")
        mode = "disabled"
    resolved.run_dir, resolved.wandb_mode, resolved.deadline = str(run_dir), mode, deadline
    resolved.xla_compile_cache = str(run_dir / XLA_COMPILE_CACHE)
    resolved.plan.train_args.update(data=str(prepare_data(bundle, input_root, scratch)),
                                    model=prepare_model(bundle, scratch))
    resolved.kaggle = {**(resolved.kaggle or {}), "session": bundle["session"], "kernel": bundle["kernel"]}
    resolved.resume = ResumeOrder(str(SESSION_RESUME), if_missing="fail", reason="kaggle session") if resume else None
    return resolved


def run_session(bundle: dict, run_dir: Path, deadline: float, input_root: Path, scratch: Path,
                resume: bool) -> dict:
    """Train this session with the XLA launcher's own entry (worker/xla_entry.train, one process,
    SPMD over the cores) and record how far the run got in resume.json."""
    run_dir.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    from orchestrator.worker.offline import prepare_env

    prepare_env()  # offline Ultralytics: before it is imported
    session_resolved(bundle, run_dir, deadline, input_root, scratch, resume).save(run_dir)
    before = completed_epochs(run_dir) if resume else 0
    if resume:
        log(f"resuming after epoch {before}/{bundle['epochs']}")
    events = EventWriter(run_dir / EVENTS)
    events.emit("session_start", session=bundle["session"], kernel=bundle["kernel"], start_epoch=before,
                epochs=bundle["epochs"], deadline=deadline, devices=bundle["devices"])
    from orchestrator.worker import xla_entry

    code = xla_entry.train(run_dir)
    if code != 0:
        raise SessionError(f"the training process ended with code {code} (see the log above)")
    summary = json.loads((run_dir / SUMMARY).read_text())
    paused = summary["state"] == "paused"
    done_epochs = int(summary["epochs_completed"])
    if not paused:
        (run_dir / SESSION_RESUME).unlink(missing_ok=True)  # the run is over: last.pt is final
    reason = (f"stopped before the session limit after epoch {done_epochs}/{bundle['epochs']}"
              if paused else "training finished")
    events.emit("session_end", state=summary["state"], epochs_done=done_epochs, reason=reason)
    return write_resume_state(run_dir, bundle, epochs_done=done_epochs, done=not paused, state=summary["state"],
                              reason=reason, metrics=summary["metrics"],
                              checkpoint=str(SESSION_RESUME if paused else LAST))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m orchestrator.worker.kaggle_session")
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--deadline", type=float, required=True, help="epoch seconds: no epoch may end after it")
    p.add_argument("--input-root", type=Path, default=Path(os.environ.get("KAGGLE_INPUT_DIR") or "/kaggle/input"))
    p.add_argument("--scratch", type=Path, default=None)
    p.add_argument("--resume", action="store_true")
    ns = p.parse_args(argv)
    bundle = json.loads(ns.bundle.read_text())
    scratch = ns.scratch or ns.run_dir.parents[2]
    run_dir = ns.run_dir.resolve()
    try:
        state = run_session(bundle, run_dir, ns.deadline, ns.input_root, scratch, ns.resume)
    except Exception as exc:  # noqa: BLE001 - recorded for the launcher, then re-raised as exit 1
        traceback.print_exc()
        run_dir.mkdir(parents=True, exist_ok=True)
        write_resume_state(run_dir, bundle, epochs_done=completed_epochs(run_dir), done=False, state="failed",
                           reason=f"{type(exc).__name__}: {exc}"[:500])
        return 1
    log(f"session {bundle['session']}: {state['state']}, {state['epochs_done']}/{state['epochs']} epochs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
