"""Plain Ultralytics, driven offline as the training process drives it (worker/offline.py: a private
settings folder, fonts provisioned, every integration off), for the benches' side-by-side rows:

    python -m orchestrator.harness.plain train JSON      # YOLO(model).train(**args): `yolo train`'s work
    python -m orchestrator.harness.plain init OUT.pt     # yolo11n.yaml at seed 0, saved as the tuner saves it
    python -m orchestrator.harness.plain pretrain JSON   # train, then copy best.pt to the JSON's `out`
    python -m orchestrator.harness.plain tune JSON       # Ultralytics' Tuner, every iteration's folder kept

JSON: the Ultralytics arguments, plus `model` (and `out`, `space`, `iterations` where named)."""

from __future__ import annotations

import json
import shutil
import sys


def _yolo():
    """Ultralytics' YOLO class, imported only once the offline settings are in place."""
    from orchestrator.worker.offline import disable_integrations, prepare_env

    prepare_env()
    from ultralytics import YOLO

    disable_integrations()
    return YOLO


def train(cfg: dict) -> None:
    from orchestrator.harness.step_times import attach_plain

    model = _yolo()(cfg.pop("model"))
    attach_plain(model)  # timings where $YOLO_ORCH_STEP_TIMES names a file (bench/bench_gpu_overhead.py)
    model.train(**cfg)


def init(out: str) -> None:
    YOLO = _yolo()
    import torch

    torch.manual_seed(0)
    YOLO("yolo11n.yaml").save(out)  # half precision, as the tuner's MultiTrainer saves its base model


def pretrain(cfg: dict) -> None:
    model, out = _yolo()(cfg.pop("model")), cfg.pop("out")
    model.train(**cfg)
    shutil.copyfile(model.trainer.best, out)


def tune(cfg: dict) -> None:
    model = _yolo()(cfg.pop("model"))
    from ultralytics.engine.tuner import Tuner

    space = {k: tuple(v) for k, v in cfg.pop("space").items()}
    iterations = cfg.pop("iterations")
    # What model.tune(space=space, iterations=iterations, **cfg) does (ultralytics/engine/model.py), except
    # cleanup=False: the tuner keeps every iteration's folder, so its per-epoch results.csv can be read.
    args = {**model.overrides, **cfg, "space": space, "mode": "train"}
    Tuner(args=args, model=model.model, _callbacks=model.callbacks)(iterations=iterations, cleanup=False)


def main(argv: list[str]) -> None:
    command, arg = argv
    if command == "init":
        init(arg)
    else:
        {"train": train, "pretrain": pretrain, "tune": tune}[command](json.loads(arg))


if __name__ == "__main__":
    main(sys.argv[1:])
