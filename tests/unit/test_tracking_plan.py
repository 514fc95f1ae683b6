"""The trackers and the export on the orchestrator side, without training: what `create_run` writes for
them, and that a run with them re-plans (resume onto other devices, an OOM restart re-validates the stored
job with the same model)."""

from __future__ import annotations

import json

from conftest import write_job
from orchestrator import runner
from orchestrator.jobspec.loader import load_job
from orchestrator.plan import make_plan
from orchestrator.plan.replan import replan
from orchestrator.rundir import load_resolved


def test_a_run_with_every_tracker_and_export_replans_onto_other_devices(tmp_path, monkeypatch):
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    job = write_job(tmp_path, mlflow={"experiment": "detectors", "tags": {"team": "vision"}}, tensorboard=True,
                    integrations=["tensorboard"], export=["onnx", "torchscript"])
    monkeypatch.chdir(tmp_path)
    run_id, run_dir = runner.create_run(make_plan(load_job(job)))
    record = json.loads((run_dir / "mlflow.json").read_text())
    assert record == {"settings": {"tracking_uri": f"sqlite:///{tmp_path.resolve() / 'runs' / 'mlflow.db'}",
                                   "experiment": "detectors", "run_name": None, "tags": {"team": "vision"},
                                   "fallback_uri": f"sqlite:///{tmp_path.resolve() / 'runs' / 'mlflow.db'}"}}
    resolved = load_resolved(run_dir)
    assert resolved.job.mlflow["tracking_uri"] is None  # the job as written; the store decided is the record's
    assert resolved.job.tensorboard and resolved.job.integrations == ("tensorboard",)
    assert resolved.job.export_formats == ("onnx", "torchscript") and resolved.job.export_tolerance == 0.01
    moved = replan(resolved, devices="cpu:2")
    assert moved.devices == "cpu:2" and moved.world_size == 2


def test_a_relative_sqlite_store_is_made_absolute_at_run_creation(tmp_path, monkeypatch):
    """SQLAlchemy reads sqlite:///x.db against the working folder, which the training process does not share."""
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    job = write_job(tmp_path, mlflow={"tracking_uri": "sqlite:///tracking/store.db"})
    monkeypatch.chdir(tmp_path)
    _, run_dir = runner.create_run(make_plan(load_job(job)))
    settings = json.loads((run_dir / "mlflow.json").read_text())["settings"]
    assert settings["tracking_uri"] == f"sqlite:///{tmp_path.resolve() / 'tracking' / 'store.db'}"
    assert settings["experiment"] == "tiny"  # the job's name
