"""The training process's trackers keep one interface (worker/trackers.Tracker) and start one way (trackers.start):
caught up to the epochs earlier attempts trained, their warning said once. TensorBoard's real writer stands in for
the three here; W&B and MLflow start the same way in the e2e tests (test_tracking, test_wandb_offline)."""

from __future__ import annotations

import inspect
import json

from orchestrator.harness.tracking import tensorboard_steps
from orchestrator.worker import trackers
from orchestrator.worker.mlflow_logger import MlflowLogger
from orchestrator.worker.tensorboard_logger import TensorboardLogger
from orchestrator.worker.wandb_logger import WandbLogger

PROTOCOL = {name for name, _ in inspect.getmembers(trackers.Tracker, inspect.isfunction) if not name.startswith("_")}


def test_each_tracker_keeps_the_one_interface():
    assert PROTOCOL == {"start", "started", "log_epoch", "finish", "record"}
    for cls in (WandbLogger, MlflowLogger, TensorboardLogger):
        for name in PROTOCOL:
            theirs, ours = inspect.signature(getattr(cls, name)), inspect.signature(getattr(trackers.Tracker, name))
            assert list(theirs.parameters) == list(ours.parameters), (cls.__name__, name, theirs, ours)
        assert isinstance(cls.name, str) and cls.name


def _events(run_dir, epochs):
    lines = [{"event": "epoch", "epoch": e, "epochs": 3, "metrics": {"metrics/mAP50-95(B)": 0.1 * e}} for e in epochs]
    (run_dir / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_a_started_tracker_is_caught_up_and_logs_each_epoch_once(tmp_path, capsys):
    _events(tmp_path, [1, 2])  # what an earlier attempt trained
    warned = []
    tracker = trackers.start(TensorboardLogger(tmp_path), warned.append)
    assert tracker.started() and warned == [] and capsys.readouterr().err == ""
    tracker.log_epoch(2, {"metrics/mAP50-95(B)": 0.9})  # held already: not again
    tracker.log_epoch(3, {"metrics/mAP50-95(B)": 0.3})
    tracker.finish({})
    tracker.finish({})  # twice does nothing
    assert tensorboard_steps(tmp_path, "metrics/mAP50-95(B)") == [1, 2, 3]
    assert tracker.record()["epochs"] == 3 and tracker.record()["warnings"] == []


def test_a_tracker_that_cannot_start_says_so_once_and_costs_nothing(tmp_path, capsys):
    (tmp_path / "tensorboard").write_text("a file where its folder goes")
    _events(tmp_path, [1])
    warned = []
    tracker = trackers.start(TensorboardLogger(tmp_path), warned.append)
    assert not tracker.started() and len(warned) == 1 and "TensorBoard could not start" in warned[0]
    assert capsys.readouterr().err.count("TensorBoard could not start") == 1
    tracker.log_epoch(2, {"metrics/mAP50-95(B)": 0.2})
    tracker.finish({})
    assert tracker.record()["warnings"] == warned and len(warned) == 1
