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


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]
