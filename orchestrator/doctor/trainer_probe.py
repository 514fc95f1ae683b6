"""What the installed Ultralytics trainer really applies, step by step (`doctor --verify-plan`, and the
release matrix of the tests). Run in a subprocess, it imports torch and Ultralytics:

    python -m orchestrator.doctor.trainer_probe '{"train": {...train args...}, "auto": {...}}'

trains the "train" arguments (a few steps on a small dataset) recording, after each step, accumulate and
every param group's lr, initial lr and momentum with the schedule's factor; builds a stock `optimizer=auto` trainer
from the "auto" arguments and records what it picked; prints one line `PROBE {json}`.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("YOLO_OFFLINE", "1")


def train_steps(args: dict) -> dict:
    from ultralytics.models.yolo.detect import DetectionTrainer

    steps: list[dict] = []

    def record(trainer) -> None:  # after the step's warmup updates and its optimizer step
        steps.append({
            "accumulate": trainer.accumulate,
            "lr": [g["lr"] for g in trainer.optimizer.param_groups],
            "initial_lr": [g["initial_lr"] for g in trainer.optimizer.param_groups],
            "lf": trainer.lf(trainer.epoch),
            "momentum": [g.get("momentum") for g in trainer.optimizer.param_groups],
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


def main(argv: list[str]) -> None:
    request = json.loads(argv[0])
    import ultralytics

    out = {"version": ultralytics.__version__, "file": ultralytics.__file__, "train": train_steps(request["train"]),
           "auto": auto_pick(request["auto"]) if request.get("auto") else None}
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
