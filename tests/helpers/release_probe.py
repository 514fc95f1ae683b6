"""Run with an Ultralytics release on PYTHONPATH (tests/e2e/test_release_matrix.py): trains the given
arguments for a few steps and prints, as one JSON line, what the release's trainer really applied at
each step (accumulate, every param group's lr and initial lr, the lr schedule's factor), then builds a
stock `optimizer=auto` trainer and prints what it picked.

    python release_probe.py '{"train": {...}, "auto": {...}}'
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("YOLO_OFFLINE", "1")


def train_steps(args: dict) -> dict:
    from ultralytics.models.yolo.detect import DetectionTrainer

    steps: list[dict] = []

    def record(trainer) -> None:  # after the step's warmup updates and optimizer step
        steps.append({
            "accumulate": trainer.accumulate,
            "lr": [g["lr"] for g in trainer.optimizer.param_groups],
            "initial_lr": [g["initial_lr"] for g in trainer.optimizer.param_groups],
            "lf": trainer.lf(trainer.epoch),
        })

    trainer = DetectionTrainer(overrides=args)
    trainer.add_callback("on_train_batch_end", record)
    trainer.train()
    groups = trainer.optimizer.param_groups
    return {"steps": steps, "batches": len(trainer.train_loader), "optimizer": type(trainer.optimizer).__name__,
            "weight_decay": [g["weight_decay"] for g in groups], "group_names": [g.get("param_group") for g in groups]}


def auto_pick(args: dict) -> dict:
    from ultralytics.models.yolo.detect import DetectionTrainer

    trainer = DetectionTrainer(overrides=args)
    trainer._setup_train()
    return {"optimizer": type(trainer.optimizer).__name__, "lr0": trainer.optimizer.param_groups[0]["initial_lr"]}


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    import ultralytics

    out = {"version": ultralytics.__version__, "file": ultralytics.__file__, "train": train_steps(request["train"]),
           "auto": auto_pick(request["auto"])}
    print("PROBE " + json.dumps(out))
