"""The training process for XLA targets (`xla:cpu`, `xla:cpu:N`, `tpu:N`), locally (the `xla`
launcher) and in a Kaggle kernel (worker/kaggle_session.py calls `train` too): the fixed-shape XLA
backend (orchestrator/worker/xla) instead of Ultralytics' own loop, inside the same start-up and
ending as every training process (worker/startup.py).

    python -m orchestrator.worker.xla_entry RUN_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

from orchestrator.data.cache import cache_dir
from orchestrator.rundir import ResolvedRun
from orchestrator.worker.startup import Started, Trained, environment_info, run_dir_main, run_worker


class Hooks:
    """Ultralytics' `model.add_callback` for a trainer built later: the XLA trainer takes its
    callbacks as a table, and the same attach functions (epoch reporter, deadline, named hooks
    such as a sweep trial's) fill it as they fill a YOLO model."""

    def __init__(self) -> None:
        self.table: dict[str, list[Callable]] = {}

    def add_callback(self, event: str, fn: Callable) -> None:
        self.table.setdefault(event, []).append(fn)


def select_devices(resolved: ResolvedRun) -> None:
    """PJRT's device type (and, for xla:cpu:N, N virtual devices) before torch_xla starts."""
    on_tpu = resolved.plan.on_tpu
    os.environ.setdefault("PJRT_DEVICE", "TPU" if on_tpu else "CPU")
    if not on_tpu:
        os.environ["CPU_NUM_DEVICES"] = str(resolved.plan.world_size)


def compile_cache(resolved: ResolvedRun) -> Path | None:
    """torch_xla's persistent cache: on a TPU only (XLA:CPU cannot read its graphs back)."""
    if not resolved.plan.on_tpu:
        return None
    return Path(resolved.xla_compile_cache or cache_dir() / "xla-compile")


def xla_environment() -> dict:
    import torch_xla

    return {**environment_info(), "torch_xla": torch_xla.__version__}


def train_on_xla(started: Started) -> Trained:
    from orchestrator.worker.xla.run import train_xla

    resolved = started.resolved
    hooks = Hooks()
    reporter = started.attach_hooks(hooks)
    result = train_xla(started.args, started.run_dir, world_size=resolved.plan.world_size,
                       max_boxes=resolved.job.xla_max_boxes, bf16=resolved.plan.bf16,  # the plan's choice
                       compile_cache=compile_cache(resolved), callbacks=hooks.table,
                       resume=Path(started.checkpoint) if started.checkpoint else False)
    xla = {k: v for k, v in result.items() if k.startswith("xla/")}
    return Trained(epochs=resolved.job.epochs,
                   epochs_completed=int(result.get("epochs_completed") or len(reporter.seen)),
                   metrics={k: v for k, v in result.items() if k.startswith("metrics/") or k == "fitness"},
                   summary_extra={"xla": xla}, logged_extra=xla)


def train(run_dir: Path) -> int:
    return run_worker(run_dir, train_on_xla, before_import=select_devices, environment=xla_environment)


def main(argv: list[str] | None = None) -> int:
    return run_dir_main(train, "orchestrator.worker.xla_entry", argv)


if __name__ == "__main__":
    sys.exit(main())
