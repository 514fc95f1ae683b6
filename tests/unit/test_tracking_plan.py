"""The trackers and the export on the orchestrator side, without training: what `create_run` writes for
them, and that a run with them re-plans (resume onto other devices, an OOM restart re-validates the stored
job with the same model)."""

from __future__ import annotations

import json

from conftest import write_job
from orchestrator import runner
from orchestrator.harness.runs import walk_to
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


def test_an_export_package_that_is_there_but_does_not_import_is_refused_by_plan_and_export(tmp_path):
    """Issue 60: found is not enough (an onnx that fails to import would fail the export after the whole training):
    `plan` refuses it in one line with the install hint, and so does `yolo-orch export` of a finished run."""
    from conftest import REPO, run_cli
    from orchestrator.registry import Registry

    broken = tmp_path / "site"
    broken.mkdir()
    (broken / "onnx.py").write_text("raise ImportError('a damaged onnx')\n")
    env = {"PYTHONPATH": f"{REPO}:{broken}", "YOLO_ORCH_REGISTRY": ""}
    job = write_job(tmp_path, export=["onnx"])
    r = run_cli("plan", job, cwd=tmp_path, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.strip() == ("export.formats: onnx needs onnx (ImportError: a damaged onnx), onnxslim (ImportError: a "
                                "damaged onnx), which do not import here (pip install 'yolo-orch[export]')"), r.stderr
    run_dir = tmp_path / "runs" / "job" / "r1"
    (run_dir / "weights").mkdir(parents=True)
    (run_dir / "weights" / "best.pt").write_bytes(b"PK\x03\x04")
    with Registry.open(tmp_path / "runs") as reg:
        reg.add_run("r1", job="job", run_dir=run_dir)
        walk_to(reg, "r1", "finished")
    r = run_cli("export", "r1", "-f", "onnx", "--runs-dir", tmp_path / "runs", cwd=tmp_path, env=env)
    assert r.returncode == 2 and "--format: onnx needs onnx (ImportError: a damaged onnx)" in r.stderr, r.stderr
    assert "pip install 'yolo-orch[export]'" in r.stderr


def test_an_integration_outside_the_tracking_extra_names_its_own_package():
    from orchestrator.tracking import PACKAGES, install_hint

    assert install_hint(PACKAGES["comet"]) == "pip install comet_ml"
    assert install_hint(PACKAGES["mlflow"]) == "pip install 'yolo-orch[tracking]'"


def test_an_export_of_a_model_that_scores_nothing_says_nothing_was_compared():
    """Issue 60: best.pt at 0 on every val metric makes any export's 0 a vacuous match: the line says so."""
    from orchestrator.exports import describe
    from orchestrator.worker.export import comparable

    zero = {"metrics/mAP50(B)": 0.0, "metrics/mAP50-95(B)": 0.0}
    assert not comparable(zero) and comparable({**zero, "metrics/precision(B)": 0.01})
    record = {"format": "onnx", "file": "/r/exports/best.onnx", "size_bytes": 600_000, "ok": True, "difference": 0.0,
              "tolerance": 0.01, "compared": comparable(zero)}
    assert describe(record) == ("export onnx: /r/exports/best.onnx (0.6 MB), not compared with best.pt: best.pt scores "
                                "0 on every val metric, so the export's 0 says nothing of its fidelity")
    assert "within the tolerance" in describe({**record, "compared": True})
