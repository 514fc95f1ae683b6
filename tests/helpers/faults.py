"""Test-only fault injection inside the training process, switched on by environment variables.
The tests load it by name (YOLO_ORCH_CALLBACKS=tests.helpers.faults:attach, set in conftest.py), as
the worker loads any named hook (worker/callbacks.attach_named); without the variables below it
does nothing.

YOLO_ORCH_FAULT_OOM="epoch=E[,step=I][,above=B][,rank=R]"
    Raise torch.cuda.OutOfMemoryError inside Ultralytics' forward/backward `try` block (from
    `preprocess_batch`, where a real OOM would surface, so Ultralytics' own OOM handler sees it
    first) at batch index I (default 0) of epoch E (1-based, default 1).
    Without `above`: once per run directory (a marker file records that it fired).
    With `above=B`: whenever the per-device batch is larger than B (a memory limit).
    `rank=R`: only on that rank (default: every rank; -1 is a single process).
YOLO_ORCH_FAULT_SLEEP="epoch=E,seconds=S[,once=1]"
    Sleep S seconds at the start of epoch E (1-based): holds a run mid-training so a test can
    kill it at a known point. `once=1`: only the first time any rank of the run directory gets there
    (a marker file), so the attempt after an interruption trains on.
YOLO_ORCH_FAULT_SLEEP_FINAL="seconds=S"
    Sleep S seconds as the final validation of best.pt starts (the validation after the last epoch's, which
    Ultralytics runs once every epoch is recorded): a kill then is a kill during the final validation.
YOLO_ORCH_FAULT_HANG="epoch=E,batch=B,rank=R[,seconds=S]"
    Rank R (-1: a single process) hangs at the start of batch B (1-based) of epoch E, before its
    forward pass, for S seconds (default an hour), once per run directory: the other ranks then
    wait in the gradient all-reduce, as with a dead dataloader worker (the stall watchdog's case).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

ENV_OOM = "YOLO_ORCH_FAULT_OOM"
ENV_SLEEP = "YOLO_ORCH_FAULT_SLEEP"
ENV_HANG = "YOLO_ORCH_FAULT_HANG"
ENV_SLEEP_FINAL = "YOLO_ORCH_FAULT_SLEEP_FINAL"
MARKER = ".fault_oom_fired"
HANG_MARKER = ".fault_hang_fired"
SLEEP_MARKER = ".fault_sleep_fired"


def parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        out[key.strip()] = float(value)
    return out


def attach(model, run_dir: Path, resolved=None) -> None:  # resolved: the run's rundir.ResolvedRun
    oom = os.environ.get(ENV_OOM)
    if oom:
        model.add_callback("on_train_epoch_start", _OomFault(parse(oom), run_dir))
    sleep = os.environ.get(ENV_SLEEP)
    if sleep:
        cfg = parse(sleep)

        def hold(trainer, cfg=cfg):
            if int(trainer.epoch) + 1 == int(cfg.get("epoch", 1)):
                if cfg.get("once"):
                    if (run_dir / SLEEP_MARKER).exists():
                        return
                    (run_dir / SLEEP_MARKER).write_text("slept")
                print(f"yolo-orch fault hook: sleeping {cfg.get('seconds', 60)} s at epoch {trainer.epoch + 1}",
                      flush=True)
                time.sleep(cfg.get("seconds", 60))

        model.add_callback("on_train_epoch_start", hold)
    hang = os.environ.get(ENV_HANG)
    if hang:
        model.add_callback("on_train_batch_start", _Hang(parse(hang), run_dir))
    final = os.environ.get(ENV_SLEEP_FINAL)
    if final:
        seconds = parse(final).get("seconds", 60)
        validations = {"epochs": 0}

        def epoch_done(trainer):
            validations["epochs"] = int(trainer.epoch) + 1

        def hold_final(validator):
            # the validator of the final validation is the one that starts after the last epoch's fit ended
            if validations["epochs"] == int(resolved.plan.epochs) and getattr(validator, "training", True) is False:
                print(f"yolo-orch fault hook: sleeping {seconds} s in the final validation", flush=True)
                time.sleep(seconds)

        model.add_callback("on_fit_epoch_end", epoch_done)
        model.add_callback("on_val_start", hold_final)


class _Hang:
    def __init__(self, cfg: dict[str, float], run_dir: Path):
        self.epoch, self.batch, self.rank = int(cfg.get("epoch", 1)), int(cfg.get("batch", 1)), int(cfg.get("rank", -1))
        self.seconds = cfg.get("seconds", 3600)
        self.marker = run_dir / HANG_MARKER
        self.at = (-1, 0)  # (epoch, batch) of the batch starting now

    def __call__(self, trainer) -> None:
        epoch = int(trainer.epoch) + 1
        self.at = (epoch, self.at[1] + 1 if self.at[0] == epoch else 1)
        if (*self.at, int(os.environ.get("RANK", -1))) != (self.epoch, self.batch, self.rank):
            return
        if self.marker.exists():
            return
        self.marker.write_text("hung")
        print(f"yolo-orch fault hook: rank {self.rank} hangs at epoch {self.epoch} batch {self.batch}", flush=True)
        time.sleep(self.seconds)


class _OomFault:
    def __init__(self, cfg: dict[str, float], run_dir: Path):
        self.epoch = int(cfg.get("epoch", 1))
        self.step = int(cfg.get("step", 0))
        self.above = int(cfg["above"]) if "above" in cfg else None
        self.rank = int(cfg["rank"]) if "rank" in cfg else None
        self.marker = run_dir / MARKER

    def __call__(self, trainer) -> None:
        if int(trainer.epoch) + 1 != self.epoch:
            return
        if self.rank is not None and int(os.environ.get("RANK", -1)) != self.rank:
            return
        per_device = int(trainer.batch_size) // max(int(trainer.world_size or 0), 1)
        if self.above is not None:
            if per_device <= self.above:
                return
        elif self.marker.exists():
            return
        original = trainer.preprocess_batch
        count = {"i": 0}

        def preprocess_batch(batch):
            i = count["i"]
            count["i"] += 1
            if i == self.step and (self.above is not None or not self.marker.exists()):
                import torch

                if self.above is None:
                    self.marker.touch()
                trainer.preprocess_batch = original  # at most once per epoch
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate 2.00 GiB (yolo-orch fault hook: epoch {self.epoch}, "
                    f"step {i}, batch {per_device} per device)"
                )
            return original(batch)

        trainer.preprocess_batch = preprocess_batch
