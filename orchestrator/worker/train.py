"""The training process: rebuilds the Ultralytics trainer from job.resolved.yaml,
attaches the orchestrator's callbacks and trains. Only this layer imports torch
and ultralytics.

    python -m orchestrator.worker.train RUN_DIR
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.rundir import (ENV, EVENTS, EXIT_NOT_RESUMABLE, EXIT_OOM, EventWriter, finish_run, is_primary,
                                 load_resolved, write_json_atomic)
from orchestrator.worker.offline import disable_integrations, prepare_env, skip_amp_download_check


def on_cpu(plan: dict) -> bool:
    """The plan's devices are CPUs (cpu, cpu:N, MxN on CPU nodes: Mxcpu:N)."""
    devices = str(plan["devices"])
    return devices == "cpu" or devices.startswith("cpu:") or "xcpu:" in devices


def environment_info() -> dict:
    import torch
    import torchvision
    import ultralytics

    info = {
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
    return info


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def train(run_dir: Path, trainer_factory=None) -> int:
    """`trainer_factory(resolved)`, when given, returns the Ultralytics trainer class to use; it is
    called after the offline setup, so it may import ultralytics (worker/ddp.py: torchrun ranks)."""
    resolved = load_resolved(run_dir)
    plan = resolved["plan"]
    from orchestrator.worker import recovery

    recovery.watch_supervisor()
    args = dict(plan["train_args"])
    prepare_env()
    from ultralytics import YOLO

    disable_integrations()
    if not on_cpu(plan):
        skip_amp_download_check()

    try:
        resume_args = recovery.resume_arguments(run_dir, resolved, args)
    except recovery.NotResumable as exc:
        print(f"yolo-orch: cannot resume: {exc}", file=sys.stderr, flush=True)
        return EXIT_NOT_RESUMABLE

    primary = is_primary()
    events = EventWriter(run_dir / EVENTS) if primary else None
    if primary:
        write_json_atomic(run_dir / ENV, environment_info())

    from orchestrator.worker.wandb_logger import start_for_run

    wandb_logger = start_for_run(run_dir, resolved, warn=lambda m: events.emit("warning", message=m)) if primary else None
    sinks = [wandb_logger.log_epoch] if wandb_logger else []

    from orchestrator.worker import heartbeat
    from orchestrator.worker.callbacks import EpochReporter, attach_named
    from orchestrator.worker.grad_norm import GradNormMeter

    model = YOLO(resume_args["resume"] if resume_args else args.pop("model"), task=resolved["job"]["task"])
    recovery.attach(model, run_dir)
    heartbeat.attach(model, run_dir, resolved)  # every rank: the orchestrator's stall watchdog reads it
    grad_norm = GradNormMeter()
    grad_norm.attach(model)
    reporter = EpochReporter(events, sinks, extras=[grad_norm.epoch_metrics])
    reporter.attach(model)
    attach_named(model, run_dir, resolved)  # e.g. a sweep trial's: report each epoch to Optuna, stop when pruned
    started = time.time()
    exit_code = 1
    final: dict = {}
    try:
        trainer_cls = trainer_factory(resolved) if trainer_factory else None
        try:
            model.train(project=str(run_dir.parent), name=run_dir.name, exist_ok=True, trainer=trainer_cls,
                        **(resume_args or args))
        except Exception as exc:
            if not recovery.is_oom(exc):
                raise
            recovery.report_oom(run_dir, model, exc)
            exit_code = EXIT_OOM
            return exit_code
        trainer = model.trainer
        final = {k: round(float(v), 6) for k, v in (trainer.metrics or {}).items()}
        exit_code = 0
        if primary:
            finish_run(run_dir, events, epochs=trainer.epochs, metrics=final, started=started,
                       epochs_completed=max(reporter.seen) + 1 if reporter.seen else 0)
    finally:
        grad_norm.restore()
        recovery.cleanup(run_dir)
        if wandb_logger is not None:
            wandb_logger.finish(final, exit_code=exit_code)
    return exit_code


def run_dir_main(entry, module: str, argv: list[str] | None = None) -> int:
    """`python -m MODULE RUN_DIR` for a worker entry point `entry(run_dir) -> exit code`."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(f"usage: python -m {module} RUN_DIR", file=sys.stderr)
        return 2
    return entry(Path(argv[0]).resolve())


def main(argv: list[str] | None = None) -> int:
    return run_dir_main(train, "orchestrator.worker.train", argv)


def exit_now(code: int) -> None:
    """End the process without interpreter teardown. Everything the run keeps is already
    written (checkpoints, events, summary: atomically, closed), and tearing down torch and
    Ultralytics costs about a second of wall time per run on a 2-core CPU (measured)."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
