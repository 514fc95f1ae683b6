"""The training process for XLA targets (`xla:cpu`, `xla:cpu:N`, `tpu:N`), locally (the `xla`
launcher) and in a Kaggle kernel (worker/kaggle_session.py calls `train` too): the same run
directory contract as worker/train.py (job.resolved.yaml with its `resume`, `callbacks` and
`deadline`; env.json, events.jsonl, summary.json), with the fixed-shape XLA backend
(orchestrator/worker/xla) instead of Ultralytics' own loop.

    python -m orchestrator.worker.xla_entry RUN_DIR
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

from orchestrator.rundir import (COMPILE_CACHE, ENV, EVENTS, EXIT_NOT_RESUMABLE, EventWriter, cache_dir, finish_run,
                                 load_resolved, write_json_atomic)
from orchestrator.worker.offline import disable_integrations, prepare_env
from orchestrator.worker.train import environment_info, run_dir_main


class Hooks:
    """Ultralytics' `model.add_callback` for a trainer built later: the XLA trainer takes its
    callbacks as a table, and the same attach functions (epoch reporter, deadline, named hooks
    such as a sweep trial's) fill it as they fill a YOLO model."""

    def __init__(self) -> None:
        self.table: dict[str, list[Callable]] = {}

    def add_callback(self, event: str, fn: Callable) -> None:
        self.table.setdefault(event, []).append(fn)


def select_devices(plan: dict) -> bool:
    """PJRT's device type (and, for xla:cpu:N, N virtual devices) before torch_xla starts; True on a TPU."""
    on_tpu = plan["devices"].startswith("tpu")
    os.environ.setdefault("PJRT_DEVICE", "TPU" if on_tpu else "CPU")
    if not on_tpu:
        os.environ["CPU_NUM_DEVICES"] = str(plan["world_size"])
    return on_tpu


def compile_cache(resolved: dict, on_tpu: bool) -> Path | None:
    """torch_xla's persistent cache: on a TPU only (XLA:CPU cannot read its graphs back)."""
    if not on_tpu:
        return None
    return Path(resolved.get(COMPILE_CACHE) or cache_dir() / "xla-compile")


def train(run_dir: Path) -> int:
    from orchestrator.worker import deadline, recovery

    recovery.watch_supervisor()
    resolved = load_resolved(run_dir)
    plan = resolved["plan"]
    on_tpu = select_devices(plan)
    args = dict(plan["train_args"])
    prepare_env()
    import ultralytics  # noqa: F401 - settings must exist before disabling integrations

    disable_integrations()
    from orchestrator.worker.callbacks import EpochReporter, attach_named
    from orchestrator.worker.wandb_logger import start_for_run
    from orchestrator.worker.xla.run import train_xla

    try:
        resume_args = recovery.resume_arguments(run_dir, resolved, args)
    except recovery.NotResumable as exc:
        print(f"yolo-orch: cannot resume: {exc}", file=sys.stderr, flush=True)
        return EXIT_NOT_RESUMABLE
    events = EventWriter(run_dir / EVENTS)
    import torch_xla

    write_json_atomic(run_dir / ENV, {**environment_info(), "torch_xla": torch_xla.__version__})
    wandb_logger = start_for_run(run_dir, resolved, warn=lambda m: events.emit("warning", message=m))
    hooks = Hooks()
    reporter = EpochReporter(events, [wandb_logger.log_epoch] if wandb_logger else [])
    reporter.attach(hooks)
    deadline.attach(hooks, run_dir, resolved)
    attach_named(hooks, run_dir, resolved)
    started = time.time()
    result: dict = {}
    exit_code = 1
    try:
        result = train_xla(args, run_dir, world_size=int(plan["world_size"]),
                           max_boxes=int(resolved["job"]["xla"]["max_boxes"]),
                           bf16=plan["scaling"]["effective"]["precision"] == "bf16",  # the plan's choice
                           compile_cache=compile_cache(resolved, on_tpu), callbacks=hooks.table,
                           resume=Path(resume_args["resume"]) if resume_args else False)
        finish_run(run_dir, events, epochs=resolved["job"]["epochs"], started=started,
                   epochs_completed=int(result.get("epochs_completed") or len(reporter.seen)),
                   metrics={k: v for k, v in result.items() if k.startswith("metrics/") or k == "fitness"},
                   xla={k: v for k, v in result.items() if k.startswith("xla/")})
        exit_code = 0
    finally:
        recovery.cleanup(run_dir)
        if wandb_logger is not None:
            wandb_logger.finish(result, exit_code=exit_code)
    return exit_code


def main(argv: list[str] | None = None) -> int:
    return run_dir_main(train, "orchestrator.worker.xla_entry", argv)


if __name__ == "__main__":
    sys.exit(main())
