"""What the training process's trackers (wandb_logger, mlflow_logger, tensorboard_logger) share: the epochs a
run trained, to catch a tracker up at start, and the one line of an error that a warning quotes."""

from __future__ import annotations

from pathlib import Path

from orchestrator.rundir import EVENTS, trained_epoch_events


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
