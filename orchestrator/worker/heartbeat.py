"""Each rank's progress, for the orchestrator's stall watchdog (orchestrator/watchdog.py).

From the start of training (`on_train_start`), every rank keeps (epoch, batch, phase) in memory:
`batch` when a batch arrives from the loader, `forward` when the model's forward pass starts (a
pre-hook: it tells a rank blocked before its forward pass from ranks already waiting in the
gradient all-reduce), `done` when the batch ended, `val` for each validation batch. A daemon thread writes it once a second to
heartbeat/rank<R>.json with the time it last changed, so a frozen rank shows as a record that
stops changing while the writer thread goes on (it needs the GIL only briefly; collectives,
sleeps and I/O release it).

STACK_SIGNAL (SIGUSR2) makes faulthandler write every thread's Python stack to stacks/rank<R>.txt.
faulthandler answers from C, so it works on a process stuck in a collective or a lock, where a
Python signal handler would never run.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import threading
import time
from pathlib import Path

from orchestrator.rundir import HEARTBEATS, STACK_SIGNAL, STACKS, ResolvedRun, rank, write_json_atomic

WRITE_EVERY_S = 1.0


class Heartbeat:
    def __init__(self, run_dir: Path, rank_id: int):
        self.path = Path(run_dir) / HEARTBEATS / f"rank{rank_id}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        now = time.time()
        # host: the watchdog signals a rank for its stacks only on its own machine (a Slurm node may be another)
        self.state = {"rank": rank_id, "pid": os.getpid(), "host": socket.gethostname(), "epoch": 0, "batch": 0, "phase": "start",
                      "changed": now, "slowest_step_s": 0.0}
        self._batch_started = now
        stacks = Path(run_dir) / STACKS
        stacks.mkdir(parents=True, exist_ok=True)
        # kept open: faulthandler writes to its fd; O_NOFOLLOW: never through a link planted in the run dir
        fd = os.open(stacks / f"rank{rank_id}.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        self._stack_file = os.fdopen(fd, "a")
        faulthandler.register(STACK_SIGNAL, file=self._stack_file, all_threads=True)

    def mark(self, phase: str, trainer=None, batch: int | None = None) -> None:
        now = time.time()
        if getattr(trainer, "epoch", None) is not None:  # (not set yet at on_train_start)
            self.state["epoch"] = int(trainer.epoch) + 1
        if batch is not None:
            self.state["batch"] = batch
        if phase == "batch":
            self._batch_started = now
        elif phase == "done" and self.state["epoch"] == 1:  # the first epoch's steps: the watchdog's yardstick
            self.state["slowest_step_s"] = round(max(self.state["slowest_step_s"], now - self._batch_started), 3)
        self.state.update(phase=phase, changed=now)

    def _write_forever(self) -> None:
        while True:
            try:
                write_json_atomic(self.path, self.state)
            except OSError:
                pass  # a full disk must not end the training; the watchdog then sees no change
            time.sleep(WRITE_EVERY_S)

    # ---- Ultralytics callbacks
    def on_train_start(self, trainer) -> None:
        """The first beat: not before (building the model and caching the dataset may take longer
        than any stall timeout, and no rank can hang another then)."""
        from ultralytics.utils.torch_utils import unwrap_model

        unwrap_model(trainer.model).register_forward_pre_hook(lambda module, args: self.mark("forward"))
        self.mark("start", trainer)
        if not any(t.name == "yolo-orch-heartbeat" for t in threading.enumerate()):
            threading.Thread(target=self._write_forever, name="yolo-orch-heartbeat", daemon=True).start()

    def on_train_epoch_start(self, trainer) -> None:
        self.mark("start", trainer, batch=0)

    def on_train_batch_start(self, trainer) -> None:
        self.mark("batch", trainer, batch=self.state["batch"] + 1)

    def on_train_batch_end(self, trainer) -> None:
        self.mark("done")

    def on_val_batch_end(self, validator) -> None:
        self.mark("val")

    def attach(self, model) -> None:
        for event in ("on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_train_batch_end",
                      "on_val_batch_end"):
            model.add_callback(event, getattr(self, event))


def attach(model, run_dir: Path, resolved: ResolvedRun) -> Heartbeat | None:
    """Every rank's heartbeat, when the job has a stall timeout."""
    if not resolved.job.stall_timeout:
        return None
    beat = Heartbeat(run_dir, max(rank(), 0))
    beat.attach(model)
    return beat
