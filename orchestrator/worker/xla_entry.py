"""The training process for XLA targets (`xla:cpu`, `xla:cpu:N`, `tpu:N`): the same run directory
contract as worker/train.py (env.json, events.jsonl, summary.json), with the
fixed-shape XLA backend (orchestrator/worker/xla) instead of Ultralytics' own loop.

    python -m orchestrator.worker.xla_entry RUN_DIR
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from orchestrator.rundir import ENV, EVENTS, EventWriter, cache_dir, finish_run, load_resolved, write_json_atomic
from orchestrator.worker.offline import disable_integrations, prepare_env
from orchestrator.worker.train import environment_info, run_dir_main


def train(run_dir: Path) -> int:
    resolved = load_resolved(run_dir)
    plan = resolved["plan"]
    on_tpu = plan["devices"].startswith("tpu")
    os.environ.setdefault("PJRT_DEVICE", "TPU" if on_tpu else "CPU")
    if not on_tpu:  # xla:cpu:N: N virtual XLA:CPU devices, before torch_xla starts
        os.environ["CPU_NUM_DEVICES"] = str(plan["world_size"])
    bf16 = plan["scaling"]["effective"]["precision"] == "bf16"  # chosen by the plan (plan.xla_bf16)
    prepare_env()
    import ultralytics  # noqa: F401 - settings must exist before disabling integrations

    disable_integrations()
    from orchestrator.worker.callbacks import EpochReporter
    from orchestrator.worker.xla.run import train_xla

    events = EventWriter(run_dir / EVENTS)
    write_json_atomic(run_dir / ENV, environment_info())
    from orchestrator.worker.wandb_logger import start_for_run

    wandb_logger = start_for_run(run_dir, resolved, warn=lambda m: events.emit("warning", message=m))
    reporter = EpochReporter(events, [wandb_logger.log_epoch] if wandb_logger else [])
    callbacks = {
        "on_train_start": [reporter.on_train_start],
        "on_train_epoch_end": [reporter.on_train_epoch_end],
        "on_fit_epoch_end": [reporter.on_fit_epoch_end],
    }
    started = time.time()
    result: dict = {}
    exit_code = 1
    try:
        result = train_xla(dict(plan["train_args"]), run_dir, world_size=int(plan["world_size"]),
                           max_boxes=int(resolved["job"]["xla"]["max_boxes"]), bf16=bf16,
                           compile_cache=cache_dir() / "xla-compile" if on_tpu else None, callbacks=callbacks)
        finish_run(run_dir, events, epochs=resolved["job"]["epochs"], started=started,
                   epochs_completed=int(result.get("epochs_completed") or len(reporter.seen)),
                   metrics={k: v for k, v in result.items() if k.startswith("metrics/") or k == "fitness"},
                   xla={k: v for k, v in result.items() if k.startswith("xla/")})
        exit_code = 0
    finally:
        if wandb_logger is not None:
            wandb_logger.finish(result, exit_code=exit_code)
    return exit_code


def main(argv: list[str] | None = None) -> int:
    return run_dir_main(train, "orchestrator.worker.xla_entry", argv)


if __name__ == "__main__":
    sys.exit(main())
