"""Per-epoch timings of a training, measured the same way on both sides of an overhead row
(bench/bench_gpu_overhead.py): the wait for each batch (from one batch's end to the next one's start: the
loader), each epoch's seconds and images, its training loss, and the peak memory. Attached to yolo-orch's
training process through $YOLO_ORCH_CALLBACKS (`attach`) and to plain Ultralytics by harness.plain
(`attach_plain`); written as JSON to $YOLO_ORCH_STEP_TIMES when training ends.

Ultralytics prints each batch's losses and memory as it goes (its progress bar formats them), which waits for
the device, so the time between two batches is the loader's and not the device's queue."""

from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

ENV_OUT = "YOLO_ORCH_STEP_TIMES"  # the JSON file to write (unset: nothing is measured)


class StepTimes:
    def __init__(self, out: Path):
        self.out = Path(out)
        self.epochs: list[dict] = []
        self._start = self._last_end = 0.0
        self._wait = 0.0
        self._batches = 0

    def on_train_epoch_start(self, trainer) -> None:
        self._start = self._last_end = time.perf_counter()
        self._wait, self._batches = 0.0, 0

    def on_train_batch_start(self, trainer) -> None:
        self._wait += time.perf_counter() - self._last_end

    def on_train_batch_end(self, trainer) -> None:
        self._last_end = time.perf_counter()
        self._batches += 1

    def on_train_epoch_end(self, trainer) -> None:
        seconds = time.perf_counter() - self._start
        losses = trainer.label_loss_items(trainer.tloss, prefix="train") if trainer.tloss is not None else {}
        self.epochs.append({"epoch": int(trainer.epoch) + 1, "seconds": round(seconds, 4),
                            "data_wait_s": round(self._wait, 4), "batches": self._batches,
                            "images": self._batches * int(trainer.batch_size),
                            "loss": round(sum(float(v) for v in losses.values()), 6) if losses else None})

    def on_train_end(self, trainer) -> None:
        self.out.write_text(json.dumps({"epochs": self.epochs, **peak_memory()}, indent=1) + "\n")

    def attach(self, model) -> None:
        for event in ("on_train_epoch_start", "on_train_batch_start", "on_train_batch_end", "on_train_epoch_end",
                      "on_train_end"):
            model.add_callback(event, getattr(self, event))


def peak_memory() -> dict:
    """The GPU's peak allocated bytes (None on a CPU) and the process's peak resident memory."""
    import torch

    gpu = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else None
    return {"peak_gpu_bytes": gpu, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def attach(model, run_dir, resolved) -> None:
    """$YOLO_ORCH_CALLBACKS's form (worker/callbacks.attach_named): on yolo-orch's training process."""
    attach_plain(model)


def attach_plain(model) -> None:
    if os.environ.get(ENV_OUT):
        StepTimes(Path(os.environ[ENV_OUT])).attach(model)


def summarize(measured: dict) -> dict:
    """Steady state (every epoch after the first): images per second and the share of the time spent waiting
    for batches; the first epoch's loss; the peak memory."""
    steady = measured["epochs"][1:] or measured["epochs"]
    seconds = sum(e["seconds"] for e in steady)
    return {"images_per_s": round(sum(e["images"] for e in steady) / seconds, 2),
            "data_wait_share": round(sum(e["data_wait_s"] for e in steady) / seconds, 4),
            "epoch1_loss": measured["epochs"][0]["loss"], "peak_gpu_bytes": measured["peak_gpu_bytes"],
            "peak_rss_bytes": measured["peak_rss_bytes"]}
