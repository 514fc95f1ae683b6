"""TensorBoard scalars from the training process (rank 0 only): every epoch's metrics and losses (the same
epoch events W&B and MLflow get) in RUN_DIR/tensorboard, so `tensorboard --logdir runs/` shows every run.

Each attempt of a run (a resume, an OOM restart) writes a new event file in the same folder; epochs go
forward only: at start the logger reads the highest step the folder holds and logs the epochs the run
trained after it (events.jsonl), so none is logged twice. TensorBoard is missing or fails: one warning,
the training goes on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from orchestrator.rundir import ResolvedRun
from orchestrator.rundir.tracking import TENSORBOARD
from orchestrator.worker import trackers
from orchestrator.worker.trackers import first_line


class TensorboardLogger:
    name = "tensorboard"

    def __init__(self, run_dir: Path):
        self.folder = Path(run_dir) / TENSORBOARD
        self.run_dir = Path(run_dir)
        self.writer = None
        self.logged_through = 0
        self.warnings: list[str] = []
        self.on_warning = None  # the run's events (worker/startup.py): the console and `show` say it

    def start(self) -> str | None:
        try:
            from torch.utils.tensorboard import SummaryWriter

            self.logged_through = last_step(self.folder)
            self.writer = SummaryWriter(log_dir=str(self.folder))
        except Exception as exc:  # noqa: BLE001 - ImportError (no tensorboard), OSError: never costs the run
            self.writer = None
            self.warnings.append(f"TensorBoard could not start ({type(exc).__name__}: {first_line(exc)}): "
                                 "this run writes no TensorBoard scalars")
            return self.warnings[-1]  # (said by trackers.start)
        return None

    def started(self) -> bool:
        return self.writer is not None

    def log_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        if self.writer is None or epoch <= self.logged_through:
            return
        try:
            for key, value in metrics.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(key, value, epoch)
            self.writer.flush()  # a kill loses nothing already logged
        except Exception as exc:  # noqa: BLE001
            self._lost(f"TensorBoard stopped at epoch {epoch} ({type(exc).__name__}: {first_line(exc)})")
            return
        self.logged_through = epoch

    def finish(self, final: dict[str, Any], exit_code: int = 0) -> None:
        if self.writer is not None:
            try:
                self.writer.close()
            except Exception as exc:  # noqa: BLE001
                self._lost(f"TensorBoard could not close its file ({type(exc).__name__}: {first_line(exc)})")
        self.writer = None

    def record(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "epochs": self.logged_through, "warnings": self.warnings}

    def _lost(self, message: str) -> str:
        self.writer = None
        self.warnings.append(message)
        print(f"yolo-orch: warning: {message}", file=sys.stderr, flush=True)
        if self.on_warning is not None:
            self.on_warning(message)
        return message


def last_step(folder: Path) -> int:
    """The highest step of any scalar in the folder's event files (0: none, or no folder)."""
    if not folder.is_dir():
        return 0
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps = [0]
    for path in sorted(folder.glob("events.out.tfevents.*")):
        try:
            for event in EventFileLoader(str(path)).Load():
                if event.HasField("summary"):
                    steps.append(event.step)
        except Exception:  # noqa: BLE001 - a file torn by a kill: the steps before the tear count
            continue
    return max(steps)


def start_for_run(run_dir: Path, resolved: ResolvedRun, warn=None) -> TensorboardLogger | None:
    """The run's TensorBoard writer, started (trackers.start); None when the job does not ask for one.
    `warn(message)` receives the warning when it could not start."""
    if not resolved.job.tensorboard:
        return None
    return trackers.start(TensorboardLogger(run_dir), warn)
