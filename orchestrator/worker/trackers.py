"""The training process's trackers (wandb_logger, mlflow_logger, tensorboard_logger): the one interface they keep
(`Tracker`), their one start (`start`: started, caught up to the epochs earlier attempts trained, its warning said
once), and the one line of an error that a warning quotes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Protocol

from orchestrator.rundir import EVENTS, trained_epoch_events


class Tracker(Protocol):
    """What the training process asks of each tracker. None costs the training: each failure is a warning."""

    name: str
    run_dir: Path
    on_warning: Callable[[str], None] | None  # each warning after the start (the run's events: console, `show`)

    def start(self) -> str | None:
        """Open (or continue) the run's record; its one warning when it could not as asked (said by `start`)."""

    def started(self) -> bool:
        """Whether it took the run (a tracker that did not logs nothing and finishes at once)."""

    def log_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        """One epoch's values; an epoch it already holds is not logged again."""

    def finish(self, final: dict[str, Any], exit_code: int = 0) -> None:
        """The final values and the run closed (FINISHED or FAILED by `exit_code`); finishing twice does nothing."""

    def record(self) -> dict[str, Any] | None:
        """summary.json's record of where the run was logged and what went wrong; None: it keeps none."""


def start(tracker: Tracker, warn: Callable[[str], None] | None = None) -> Tracker:
    """`tracker` started and caught up to what earlier attempts trained (events.jsonl), before this attempt trains
    on; its warning said once, on stderr and to `warn` (the run's events), which also hears the later ones."""
    warning = tracker.start()
    tracker.on_warning = warn
    if tracker.started():
        for epoch, metrics in trained_epoch_metrics(tracker.run_dir):
            tracker.log_epoch(epoch, metrics)
    if warning:
        print(f"yolo-orch: warning: {warning}", file=sys.stderr, flush=True)
        if warn is not None:
            warn(warning)
    return tracker


def trained_epoch_metrics(run_dir: Path) -> list[tuple[int, dict]]:
    """(epoch, metrics) of each epoch the run trained (rundir.trained_epoch_events: an epoch a rewind
    declared trained again is logged when it is), in order, the last record of an epoch winning."""
    last = {event["epoch"]: event.get("metrics") or {} for event in trained_epoch_events(Path(run_dir) / EVENTS)}
    return sorted(last.items())


# SQLAlchemy's preface to an error met while flushing (MLflow's store): the error itself follows it
AUTOFLUSH_PREFACE = "(raised as a result of Query-invoked autoflush"


def first_line(exc: BaseException) -> str:
    """The line of an exception's message that says what went wrong (not SQLAlchemy's autoflush preface)."""
    text = str(exc).strip()
    if text.startswith(AUTOFLUSH_PREFACE):
        text = text.split(")", 1)[-1].lstrip(" ;\n")  # the preface's parenthesis closes before the cause
    return (text.splitlines() or [""])[0][:200]
