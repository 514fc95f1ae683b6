"""W&B logging from the training process (rank 0 only). Imports wandb lazily."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class WandbLogger:
    def __init__(self, run_dir: Path, resolved: dict[str, Any], mode: str, group: str | None = None):
        self.run_dir = run_dir
        self.resolved = resolved
        self.mode = mode
        self.group = group
        self.run = None

    def start(self) -> None:
        if self.mode == "disabled":
            return
        os.environ["WANDB_DIR"] = str(self.run_dir)
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ["WANDB_MODE"] = self.mode
        import wandb

        cfg = self.resolved["job"]["wandb"]
        self.run = wandb.init(
            project=cfg.get("project") or "yolo-orch",
            entity=cfg.get("entity"),
            group=self.group or cfg.get("group"),
            tags=cfg.get("tags") or None,
            name=self.resolved["run_id"],
            id=self.resolved["run_id"].replace(".", "-"),
            dir=str(self.run_dir),
            mode=self.mode,
            config=self.config(),
            resume="allow",
        )

    def config(self) -> dict[str, Any]:
        plan = self.resolved["plan"]
        scaling = plan["scaling"]
        hyp = plan.get("hyp", {})
        scaled = {
            key: {"reference": hyp.get(key), "passed": value}
            for key, value in scaling["passed"].items()
        }
        return {
            "job": self.resolved["job"],
            "reference": self.resolved["job"]["reference"],
            "target": {"devices": plan["devices"], "world_size": plan["world_size"]},
            "policy": scaling["policy"],
            "scaled": scaled,
            "effective": scaling["effective"],
            "reasons": scaling["reasons"],
            "train_args": plan["train_args"],
        }

    def log_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.log({"epoch": epoch, **metrics}, step=epoch)

    def finish(self, final: dict[str, Any], exit_code: int = 0) -> None:
        if self.run is None:
            return
        for key, value in final.items():
            self.run.summary[f"final/{key}"] = value
        self.run.finish(exit_code=exit_code)
        self.run = None


def start_for_run(run_dir: Path, resolved: dict[str, Any]) -> WandbLogger | None:
    """The run's W&B logger, started; None when the resolved job has W&B disabled."""
    mode = resolved.get("wandb_mode", "disabled")
    if mode == "disabled":
        return None
    logger = WandbLogger(run_dir, resolved, mode)
    logger.start()
    return logger
