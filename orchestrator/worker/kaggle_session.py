"""One Kaggle session of a job, inside the kernel (after the runner installed the wheels):

    python -m orchestrator.worker.kaggle_session --bundle B.json --run-dir DIR --deadline EPOCH_S
        [--input-root /kaggle/input] [--scratch DIR] [--resume]

Prepares the data (synth: generated here; a data yaml: its Kaggle dataset found by glob
under the input root), writes the run's job.resolved.yaml, trains with the XLA backend
(`orchestrator.worker.xla.run.train_xla`, one process, SPMD over the TPU cores) with the session deadline
callback, and writes events.jsonl, summary.json and resume.json into the run directory.
The runner script tars that directory into /kaggle/working.

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
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from orchestrator.rundir import (EVENTS, LAST, RESOLVED, SESSION_RESUME, SUMMARY, XLA_COMPILE_CACHE, EventWriter,
                                 completed_epochs, dump_yaml, run_summary, write_json_atomic, write_text_atomic)
from orchestrator.worker.kaggle_deadline import STOP_FILE, SessionDeadline

RESUME_FILE = "resume.json"


class SessionError(Exception):
    pass


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


class WandbSink:
    """Epoch metrics to W&B: the run starts at the first epoch and is finished by on_train_end."""

    def __init__(self, run_dir: str, resolved: dict, mode: str):
        self.run_dir, self.resolved, self.mode = run_dir, resolved, mode
        self.logger = None

    def __call__(self, epoch: int, metrics: dict) -> None:
        if self.logger is None:
            from orchestrator.worker.wandb_logger import WandbLogger

            self.logger = WandbLogger(Path(self.run_dir), self.resolved, self.mode)
            self.logger.start()
        self.logger.log_epoch(epoch, metrics)

    def on_train_end(self, trainer) -> None:
        if self.logger is not None:
            final = {k: round(float(v), 6) for k, v in (trainer.metrics or {}).items()}
            self.logger.finish(final)
            self.logger = None


def make_callbacks(run_dir: Path, resolved: dict, wandb_mode: str, deadline: float) -> dict[str, list]:
    """The XLA trainer's callbacks (one process drives every core): epoch events (+ W&B) and the
    session deadline."""
    from orchestrator.worker.callbacks import EpochReporter

    wandb_sink = WandbSink(str(run_dir), resolved, wandb_mode) if wandb_mode != "disabled" else None
    reporter = EpochReporter(EventWriter(run_dir / EVENTS), [wandb_sink] if wandb_sink else [])
    callbacks = {
        "on_train_start": [reporter.on_train_start],
        "on_train_epoch_end": [reporter.on_train_epoch_end],
        "on_fit_epoch_end": [reporter.on_fit_epoch_end, SessionDeadline(deadline, run_dir)],
    }
    if wandb_sink:
        callbacks["on_train_end"] = [wandb_sink.on_train_end]
    return callbacks


# ---------------------------------------------------------------- main

def run_session(bundle: dict, run_dir: Path, deadline: float, input_root: Path, scratch: Path,
                resume: bool) -> dict:
    started = time.time()
    run_dir.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    (run_dir / STOP_FILE).unlink(missing_ok=True)
    kind = bundle["device_kind"]
    os.environ.setdefault("PJRT_DEVICE", "TPU" if kind == "tpu" else "CPU")
    if kind == "xla_cpu":  # xla:cpu:N: N virtual XLA:CPU devices (SPMD as on the TPU's cores)
        os.environ["CPU_NUM_DEVICES"] = str(bundle["world_size"])
    from orchestrator.worker.offline import prepare_env

    prepare_env()  # offline Ultralytics: before it is imported

    data_yaml = prepare_data(bundle, input_root, scratch)
    model = prepare_model(bundle, scratch)
    resolved = json.loads(json.dumps(bundle["resolved"]))
    resolved.update(run_dir=str(run_dir), wandb_mode=bundle.get("wandb_mode", "disabled"))
    args = resolved["plan"]["train_args"]
    args.update(data=str(data_yaml), model=model)
    resolved.setdefault("kaggle", {}).update(session=bundle["session"], kernel=bundle["kernel"])
    write_text_atomic(run_dir / RESOLVED, dump_yaml(resolved))

    before = completed_epochs(run_dir) if resume else 0
    if resume:
        keep = run_dir / SESSION_RESUME
        last = run_dir / LAST
        if keep.is_file():
            shutil.copyfile(keep, last)
        if not last.is_file():
            raise SessionError(f"resume: {last} is missing in the restored run; nothing to resume from")
        log(f"resuming after epoch {before}/{bundle['epochs']}")

    events = EventWriter(run_dir / EVENTS)
    events.emit("session_start", session=bundle["session"], kernel=bundle["kernel"], start_epoch=before,
                epochs=bundle["epochs"], deadline=deadline, devices=bundle["devices"])
    mode = bundle.get("wandb_mode", "disabled")
    if mode != "disabled" and importlib.util.find_spec("wandb") is None:
        log("WARNING: wandb is not installed (not in the wheels dataset?): W&B disabled for this session")
        mode = "disabled"
    callbacks = make_callbacks(run_dir, resolved, mode, deadline)

    from orchestrator.worker.xla.run import train_xla

    # on a TPU the compiled graphs go into the run directory: the next session restores them with
    # the run and does not compile again (XLA:CPU cannot read them back)
    cache = run_dir / XLA_COMPILE_CACHE if kind == "tpu" else None
    result = train_xla(args, run_dir, world_size=int(bundle["world_size"]), max_boxes=int(bundle["max_boxes"]),
                       bf16=bool(bundle["bf16"]), callbacks=callbacks, resume=resume, compile_cache=cache)
    stop_file = run_dir / STOP_FILE
    paused = stop_file.is_file()
    done_epochs = int(result.get("epochs_completed") or completed_epochs(run_dir))
    metrics = {k: v for k, v in result.items() if k.startswith("metrics/") or k == "fitness"}
    state = "paused" if paused else "finished"
    if not paused:
        (run_dir / SESSION_RESUME).unlink(missing_ok=True)  # the run is over: last.pt is final
    xla = {k: result[k] for k in ("xla/compile_count", "xla/compile_time_s", "xla/steady_step_time_s",
                                  "xla/world_size") if k in result}
    summary = run_summary(run_dir, state=state, epochs=bundle["epochs"], epochs_completed=done_epochs,
                          metrics=metrics, started=started, session=bundle["session"], xla=xla)
    write_json_atomic(run_dir / SUMMARY, summary)
    reason = (f"stopped before the session limit after epoch {done_epochs}/{bundle['epochs']}"
              if paused else "training finished")
    events.emit("session_end", state=state, epochs_done=done_epochs, reason=reason)
    if not paused:
        events.emit("done", **summary)
    return write_resume_state(run_dir, bundle, epochs_done=done_epochs, done=not paused, state=state,
                              reason=reason, metrics=metrics,
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
