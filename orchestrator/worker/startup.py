"""What every training process does around its training, whichever loop trains (Ultralytics' in
worker/train.py, the XLA backend's in worker/xla_entry.py): read the run contract, go offline, honour
the resume order, record the environment, start W&B, attach the orchestrator's hooks, and end with
summary.json and the `done` event. Each entry brings only its training (`run_worker`'s `train`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator.rundir import (ENV, EVENTS, EXIT_NOT_RESUMABLE, EventWriter, ResolvedRun, finish_run, is_primary,
                                 load_resolved, write_json_atomic)
from orchestrator.rundir.tracking import default_tracking_uri
from orchestrator.worker.offline import disable_integrations, prepare_env


@dataclass
class Started:
    """A training process ready to train: the run, its arguments and where its epochs are reported."""

    run_dir: Path
    resolved: ResolvedRun
    args: dict[str, Any]  # the plan's Ultralytics train() arguments
    resume: dict[str, Any] | None  # train() arguments for a resume (worker/recovery.py); None: a fresh start
    events: EventWriter | None  # rank 0's event stream; None on the other ranks
    sinks: list[Callable[[int, dict], None]]  # per-epoch metric sinks (W&B)

    @property
    def checkpoint(self) -> str | None:
        """The checkpoint a resume continues from (weights/resume.pt: last.pt with the current plan's
        arguments); None for a fresh start."""
        return self.resume["resume"] if self.resume else None

    def attach_hooks(self, model, extras: list[Callable[[], dict]] | None = None):
        """The orchestrator's callbacks on `model` (anything with Ultralytics' add_callback): the epoch
        reporter (events.jsonl, W&B), a session deadline, and the hooks the run names (a sweep trial's
        pruning callback, tests' faults). Returns the epoch reporter."""
        from orchestrator.worker import deadline
        from orchestrator.worker.callbacks import EpochReporter, attach_named

        reporter = EpochReporter(self.events, self.sinks, extras=extras or [])
        reporter.attach(model)
        deadline.attach(model, self.run_dir, self.resolved)
        attach_named(model, self.run_dir, self.resolved)
        return reporter


@dataclass
class Trained:
    """How a training ended: exit code 0 with its metrics, or a code the orchestrator acts on (OOM)."""

    exit_code: int = 0
    epochs: int = 0
    epochs_completed: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    summary_extra: dict[str, Any] = field(default_factory=dict)  # more summary.json keys (the XLA record)
    logged_extra: dict[str, Any] = field(default_factory=dict)  # more final values for W&B


def run_worker(run_dir: Path, train: Callable[[Started], Trained], before_import: Callable[[ResolvedRun], None],
               environment: Callable[[], dict[str, Any]]) -> int:
    """A training process's life around `train`: `before_import(resolved)` runs before Ultralytics is
    imported (device selection), `environment()` is env.json's record. Returns the exit code."""
    from orchestrator.worker import recovery

    recovery.watch_supervisor()
    resolved = load_resolved(run_dir)
    before_import(resolved)
    prepare_env()
    import ultralytics  # noqa: F401 - its settings must exist before integrations are disabled

    disable_integrations(resolved.job.integrations)
    if "mlflow" in resolved.job.integrations:  # Ultralytics' own MLflow callback: the runs folder's store too
        os.environ.setdefault("MLFLOW_TRACKING_URI", default_tracking_uri(run_dir.parent.parent))
    args = dict(resolved.plan.train_args)
    try:
        resume = recovery.resume_arguments(run_dir, resolved, args)
    except recovery.NotResumable as exc:
        print(f"yolo-orch: cannot resume: {exc}", file=sys.stderr, flush=True)
        return EXIT_NOT_RESUMABLE
    primary = is_primary()
    events = EventWriter(run_dir / EVENTS) if primary else None
    if primary:
        write_json_atomic(run_dir / ENV, environment())
    trackers = start_trackers(run_dir, resolved, events) if primary else []
    started = Started(run_dir, resolved, args, resume, events, [t.log_epoch for t in trackers])
    begun, trained = time.time(), Trained(exit_code=1)
    try:
        trained = train(started)
        if trained.exit_code == 0 and primary:
            # the trackers first (their artifacts, their status): the summary says where the run was logged
            records = finish_trackers(trackers, trained)
            finish_run(run_dir, events, epochs=trained.epochs, epochs_completed=trained.epochs_completed,
                       metrics=trained.metrics, started=begun, **trained.summary_extra, **records)
    finally:
        recovery.cleanup(run_dir)
        finish_trackers(trackers, trained)  # those a failed training left open (finishing twice does nothing)
    return trained.exit_code


def start_trackers(run_dir: Path, resolved: ResolvedRun, events: EventWriter) -> list:
    """The run's trackers, started and caught up to what earlier attempts trained: W&B (unless disabled),
    MLflow and TensorBoard (when the job asks). Each warning (a tracker that fell back or could not
    start) is an event too; none costs the training."""
    from orchestrator.worker import mlflow_logger, tensorboard_logger, wandb_logger

    def warn(message: str) -> None:
        events.emit("warning", message=message)

    trackers = [wandb_logger.start_for_run(run_dir, resolved, warn=warn),
                mlflow_logger.start_for_run(run_dir, resolved, warn=warn),
                tensorboard_logger.start_for_run(run_dir, resolved, warn=warn)]
    return [t for t in trackers if t is not None]


def finish_trackers(trackers: list, trained: Trained) -> dict[str, Any]:
    """Each tracker finished with the run's final values; summary.json's record of those that keep one."""
    return finished_records(trackers, {**trained.metrics, **trained.logged_extra}, trained.exit_code)


def finished_records(trackers: list, final: dict[str, Any], exit_code: int = 0) -> dict[str, Any]:
    """Each tracker finished with `final`; the records of those that keep one (also worker/close_run.py's)."""
    for tracker in trackers:
        tracker.finish(final, exit_code=exit_code)
    records = {t.name: t.record() for t in trackers}
    return {name: record for name, record in records.items() if record is not None}


def environment_info() -> dict[str, Any]:
    """env.json: the software and hardware the run trained on."""
    import torch
    import torchvision
    import ultralytics

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "ultralytics": ultralytics.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "cpu_count": os.cpu_count(),
        "cpu_affinity": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "git_commit": _git_commit(),
    }


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def run_dir_main(entry: Callable[[Path], int], module: str, argv: list[str] | None = None) -> int:
    """`python -m MODULE RUN_DIR` for a worker entry point `entry(run_dir) -> exit code`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {module} RUN_DIR", file=sys.stderr)
        return 2
    return entry(Path(argv[0]).resolve())


def exit_now(code: int) -> None:
    """End the process without interpreter teardown. Everything the run keeps is already
    written (checkpoints, events, summary: atomically, closed), and tearing down torch and
    Ultralytics costs about a second of wall time per run on a 2-core CPU (measured)."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
