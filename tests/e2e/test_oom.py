"""OOM recovery through the test-only fault hook (YOLO_ORCH_FAULT_OOM): the worker raises
torch.cuda.OutOfMemoryError inside Ultralytics' forward `try`, exits with EXIT_OOM; the runner
halves the per-device batch through the scaler (nbs raised) and restarts from weights/last.pt
or from scratch. Images per optimizer step stay the same.

The job uses batch 6 / nbs 16 (accumulate 3, 18 images per step): Ultralytics' own first-epoch
halving would give batch 3 with accumulate round(16/3) = 5, 15 images per step; ours gives
batch 3, nbs 18, accumulate 6: 18."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import TINY_JOB, read_events, run_cli, write_job
from orchestrator.harness.tracking import metric_steps, mlflow_runs, tensorboard_steps
from orchestrator.registry import Registry

OOM_JOB = {**TINY_JOB, "name": "oomjob", "epochs": 2, "reference": {"devices": 1, "batch": 6, "nbs": 16}}
ENV = {"YOLO_ORCH_REGISTRY": ""}


def _only_run(tmp_path: Path) -> Path:
    (run_dir,) = list((tmp_path / "runs" / "oomjob").iterdir())
    return run_dir


def _images_per_step(start: dict) -> int:
    return start["batch"] * start["accumulate"]


@pytest.mark.slow
def test_oom_after_checkpoint_restarts_from_last_pt(tmp_path):
    """... and the restart continues the run's MLflow run and TensorBoard record, each epoch once."""
    job = write_job(tmp_path, {**OOM_JOB, "mlflow": {}, "tensorboard": True})
    r = run_cli("submit", job, "--json", cwd=tmp_path, env={**ENV, "YOLO_ORCH_FAULT_OOM": "epoch=2"})
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "finished"
    run_dir = _only_run(tmp_path)
    events = read_events(run_dir)
    kinds = [e["event"] for e in events]
    assert kinds.count("oom") == 1 and kinds.count("oom_restart") == 1
    oom = next(e for e in events if e["event"] == "oom")
    assert oom["epoch"] == 2 and oom["batch_per_device"] == 6 and "OutOfMemoryError" in oom["error"]
    restart = next(e for e in events if e["event"] == "oom_restart")
    assert restart["restart_from"] == "weights/last.pt"
    assert restart["batch_per_device"] == [6, 3] and restart["nbs"] == [16, 18]
    assert restart["images_per_step"] == [18, 18]
    starts = [e for e in events if e["event"] == "train_start"]
    assert [(s["batch"], s["accumulate"], s["start_epoch"]) for s in starts] == [(6, 3, 0), (3, 6, 1)]
    assert _images_per_step(starts[0]) == _images_per_step(starts[1]) == 18
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]  # epoch 1 kept, epoch 2 redone at batch 3
    log = (run_dir / "train.log").read_text()
    assert "from epoch 2 to 2 total epochs" in log and "[yolo-orch] CUDA out of memory at epoch 2" in log
    assert "Resume ignores" not in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["oom_recoveries"][0]["batch_per_device"] == [6, 3]
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert resolved["plan"]["train_args"]["batch"] == 3 and resolved["plan"]["train_args"]["nbs"] == 18
    assert resolved["oom"]["max_batch_per_device"] == 3
    with Registry.open(tmp_path / "runs") as reg:
        row = reg.get(run_dir.name)
    assert row.state == "finished" and row.oom_retries == 1 and row.attempts == 2
    assert any("per-device batch 6 -> 3" in n.text for n in row.notes)
    r = run_cli("show", run_dir.name, cwd=tmp_path, env=ENV)
    assert r.returncode == 0 and "oom recovery" in r.stdout
    uri = summary["mlflow"]["tracking_uri"]
    (run,) = mlflow_runs(uri, "oomjob")
    assert run.info.run_id == summary["mlflow"]["run_id"] and run.info.status == "FINISHED"
    assert run.data.tags["yolo_orch.attempt"] == "2" and run.data.tags["batch"] == "3"  # the restart's batch
    assert metric_steps(uri, run.info.run_id, "metrics/mAP50-95B") == [1, 2]
    assert tensorboard_steps(run_dir, "metrics/mAP50-95(B)") == [1, 2]


@pytest.mark.slow
def test_oom_first_epoch_preempts_ultralytics_halving(tmp_path):
    """At the first epoch Ultralytics 8.4 would halve the batch in-process (15 images per step);
    the worker switches that off, so the orchestrator restarts from scratch at 18."""
    job = write_job(tmp_path, OOM_JOB, epochs=1)
    r = run_cli("submit", job, cwd=tmp_path, env={**ENV, "YOLO_ORCH_FAULT_OOM": "epoch=1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "oom recovery" in r.stdout and "images per optimizer step 18 -> 18" in r.stdout
    run_dir = _only_run(tmp_path)
    events = read_events(run_dir)
    log = (run_dir / "train.log").read_text()
    assert "Reducing to batch" not in log  # Ultralytics' own halving never ran
    restart = next(e for e in events if e["event"] == "oom_restart")
    assert restart["restart_from"] == "scratch"
    starts = [e for e in events if e["event"] == "train_start"]
    assert [(s["batch"], s["accumulate"], s["start_epoch"]) for s in starts] == [(6, 3, 0), (3, 6, 0)]


@pytest.mark.slow
def test_oom_retries_exhausted(tmp_path):
    """A memory limit the batch never gets under (above=1): one retry allowed, then failed."""
    job = write_job(tmp_path, OOM_JOB, epochs=1, oom_retries=1)
    r = run_cli("submit", job, "--json", cwd=tmp_path, env={**ENV, "YOLO_ORCH_FAULT_OOM": "epoch=1,above=1"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert json.loads(r.stdout)["state"] == "failed"
    run_dir = _only_run(tmp_path)
    kinds = [e["event"] for e in read_events(run_dir)]
    assert kinds.count("oom") == 2 and kinds.count("oom_restart") == 1
    with Registry.open(tmp_path / "runs") as reg:
        row = reg.get(run_dir.name)
    assert row.state == "failed" and row.oom_retries == 1 and row.exit_code == 75
    assert "no OOM retries left (1/1 used" in row.notes[-1].text


def test_plan_oom_restart_keeps_images_per_step(tmp_path, monkeypatch):
    """Pure: successive halvings through the scaler, images per step fixed, stops at batch 1."""
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    from orchestrator import runner
    from orchestrator.plan import replan
    from orchestrator.plan import make_plan
    from orchestrator.errors import UserError
    from orchestrator.jobspec.loader import load_job

    job = write_job(tmp_path, OOM_JOB, epochs=100, reference={"devices": 1, "batch": 8, "nbs": 64})
    run_id, run_dir = runner.create_run(make_plan(load_job(job)), runs_dir=tmp_path / "runs")
    seen = []
    for retry in range(3):
        step = replan.plan_oom_restart(run_dir, retry)
        seen.append((step.batch_per_device[1], step.nbs[1], step.accumulate[1], step.images_per_step[1]))
        assert step.restart_from == "scratch"
    assert seen == [(4, 64, 16, 64), (2, 64, 32, 64), (1, 64, 64, 64)]
    with pytest.raises(UserError, match="cannot be halved further"):
        replan.plan_oom_restart(run_dir, 3)


@pytest.mark.slow
def test_oom_on_one_rank_of_two(tmp_path):
    """cpu:2 (torchrun): rank 1 alone hits the OOM at epoch 2; torchrun ends both ranks, the runner
    sees the `oom` event, halves the per-device batch (4 -> 2, accumulate 2 -> 4: 16 images per step)
    and resumes both ranks from last.pt."""
    job = write_job(tmp_path, OOM_JOB, reference={"devices": 1, "batch": 4, "nbs": 16},
                    target={"devices": "cpu:2"})
    r = run_cli("submit", job, "--json", cwd=tmp_path, env={**ENV, "YOLO_ORCH_FAULT_OOM": "epoch=2,rank=1"})
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = _only_run(tmp_path)
    events = read_events(run_dir)
    oom = [e for e in events if e["event"] == "oom"]
    assert len(oom) == 1 and oom[0]["rank"] == 1 and oom[0]["batch_per_device"] == 4
    starts = [e for e in events if e["event"] == "train_start"]
    assert [(s["batch"], s["accumulate"], s["world_size"], s["start_epoch"]) for s in starts] == \
        [(8, 2, 2, 0), (4, 4, 2, 1)]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    with Registry.open(tmp_path / "runs") as reg:
        assert reg.get(run_dir.name).oom_retries == 1


@pytest.mark.slow
def test_classify_oom_restart_rescales_lr0_for_the_mean_loss(tmp_path):
    """Halving classify's per-device batch doubles the micro-batch means added up per step (accumulate
    3 -> 6), so under SGD the re-plan halves lr0 and doubles the weight decay (scaling/scaler.py)."""
    job = write_job(tmp_path, OOM_JOB, model="yolo11n-cls.yaml",
                    hyp={"preset": "scratch-default", "optimizer": "SGD", "lr0": 0.01})
    r = run_cli("submit", job, "--json", cwd=tmp_path, env={**ENV, "YOLO_ORCH_FAULT_OOM": "epoch=2"})
    assert r.returncode == 0, r.stdout + r.stderr
    run_dir = _only_run(tmp_path)
    restart = next(e for e in read_events(run_dir) if e["event"] == "oom_restart")
    assert restart["batch_per_device"] == [6, 3] and restart["images_per_step"] == [18, 18]
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    args, wd = resolved["plan"]["train_args"], resolved["plan"]["hyp"]["weight_decay"]
    assert (args["batch"], args["nbs"], args["lr0"]) == (3, 18, 0.005)
    # x2 of what the reference applied (its Ultralytics factor 18/16); nbs 18 makes the target's factor 1
    assert args["weight_decay"] == pytest.approx(2 * wd * 18 / 16)
    assert any("classify loss is a mean" in line for line in resolved["plan"]["scaling"]["details"])
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "finished"
