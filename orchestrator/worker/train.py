"""The training process for Ultralytics' own loop (cpu, cpu:N, GPUs; every torchrun rank through
worker/ddp.py): the run's model through `YOLO.train` with the plan's exact arguments, the
orchestrator's callbacks attached. The start-up and the ending around it are worker/startup.py's.
Only the worker layer imports torch and ultralytics.

    python -m orchestrator.worker.train RUN_DIR
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from orchestrator.rundir import EXIT_OOM, ResolvedRun
from orchestrator.worker.startup import Started, Trained, environment_info, exit_now, run_dir_main, run_worker

TrainerFactory = Callable[[ResolvedRun], type]


def train(run_dir: Path, trainer_factory: TrainerFactory | None = None) -> int:
    """`trainer_factory(resolved)`, when given, returns the Ultralytics trainer class to use; it is
    called after the offline setup, so it may import ultralytics (worker/ddp.py: torchrun ranks)."""
    return run_worker(run_dir, lambda started: train_ultralytics(started, trainer_factory),
                      before_import=lambda resolved: None, environment=environment_info)


def train_ultralytics(started: Started, trainer_factory: TrainerFactory | None) -> Trained:
    from ultralytics import YOLO

    from orchestrator.worker import heartbeat, recovery
    from orchestrator.worker.grad_norm import GradNormMeter
    from orchestrator.worker.offline import skip_amp_download_check

    run_dir, resolved, args = started.run_dir, started.resolved, started.args
    if not resolved.plan.on_cpu:
        skip_amp_download_check()
    model = YOLO(started.checkpoint or args.pop("model"), task=resolved.job.task)
    recovery.attach(model, run_dir)
    heartbeat.attach(model, run_dir, resolved)  # every rank: the orchestrator's stall watchdog reads it
    grad_norm = GradNormMeter()
    grad_norm.attach(model)
    reporter = started.attach_hooks(model, extras=[grad_norm.epoch_metrics])
    try:
        trainer_cls = trainer_factory(resolved) if trainer_factory else None
        try:
            model.train(project=str(run_dir.parent), name=run_dir.name, exist_ok=True, trainer=trainer_cls,
                        **(started.resume or args))
        except Exception as exc:
            if not recovery.is_oom(exc):
                raise
            recovery.report_oom(run_dir, model, exc)
            return Trained(exit_code=EXIT_OOM)
    finally:
        grad_norm.restore()
    trainer = model.trainer
    return Trained(epochs=trainer.epochs, epochs_completed=max(reporter.seen) + 1 if reporter.seen else 0,
                   metrics={k: round(float(v), 6) for k, v in (trainer.metrics or {}).items()})


def main(argv: list[str] | None = None) -> int:
    return run_dir_main(train, "orchestrator.worker.train", argv)


if __name__ == "__main__":
    exit_now(main())
