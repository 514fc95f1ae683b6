"""`submit --devices xla:cpu` runs the XLA backend through the normal launcher path: same run directory
contract as a CPU run, compile statistics in the summary, a resume onto two devices, sweeps."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conftest import REPO, run_cli, write_job

pytestmark = [pytest.mark.slow, pytest.mark.xla,
              pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]


def test_the_compile_cache_is_written_where_it_is_asked(tmp_path):
    """train_xla(compile_cache=DIR) starts torch_xla's persistent cache before any computation, so
    the graphs land in DIR (a Kaggle TPU session keeps it in the run directory, which travels to the
    next session). XLA:CPU writes the cache but cannot read it back ("Deserializing serialized
    executable not supported"), so the second-session saving is a TPU-only effect."""
    import subprocess
    import sys

    from conftest import cli_env

    code = """
import sys
from pathlib import Path
from orchestrator.data.synth import generate_dataset
from orchestrator.worker.xla.run import train_xla
out = Path(sys.argv[1])
data = generate_dataset(out / "data", images=4, val_images=2, classes=2, imgsz=32, seed=0)
args = dict(model=sys.argv[2], data=str(data), epochs=1, imgsz=32, batch=2, nbs=2, workers=0, optimizer="SGD",
            lr0=0.01, warmup_epochs=0, plots=False, seed=0, deterministic=True)
train_xla(args, out / "run", compile_cache=out / "run" / "xla_cache")
"""
    model = str(REPO / "tests" / "assets" / "tiny-det.yaml")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path), model], env=cli_env({"PJRT_DEVICE": "CPU"}),
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    cached = list((tmp_path / "run" / "xla_cache").iterdir())
    assert cached, "no compiled graph in the cache folder"


def test_a_killed_xla_run_resumes_where_it_stopped_on_two_devices(tmp_path):
    """`submit --devices xla:cpu` runs the XLA backend through the normal launcher path, and its worker
    reads the run's `resume` section as the Ultralytics worker does: killed in epoch 2 on `xla:cpu`,
    `yolo-orch resume --devices xla:cpu:2` re-plans (SPMD over 2 virtual devices) and trains epochs 2
    and 3 only, from the checkpoint's optimizer state; the run directory is a CPU run's, with the
    compile statistics in its summary."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import cli_env

    job = write_job(tmp_path, model=str(REPO / "tests" / "assets" / "tiny-det.yaml"), imgsz=32,
                    epochs=3, reference={"devices": 1, "batch": 4, "nbs": 4})
    env = cli_env({"YOLO_ORCH_REGISTRY": "", "PJRT_DEVICE": "CPU", "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "submit", str(job), "--devices", "xla:cpu"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    run_dir, deadline = None, time.time() + 600
    while run_dir is None and time.time() < deadline:
        for events in (tmp_path / "runs").glob("*/*/events.jsonl"):
            if '"event": "epoch"' in events.read_text():
                run_dir = events.parent
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        time.sleep(0.2)
    assert run_dir is not None, "no epoch within 10 minutes"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    r = run_cli("resume", run_dir.name, "--devices", "xla:cpu:2", "--json", cwd=tmp_path,
                env={"YOLO_ORCH_REGISTRY": "", "PJRT_DEVICE": "CPU"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["replanned"] and out["devices"] == "xla:cpu:2"
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    starts = [(e["start_epoch"], e["world_size"], e["batch"]) for e in events if e["event"] == "train_start"]
    assert starts == [(0, 1, 4), (1, 2, 8)], starts  # the default rule keeps 4 images per device
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2, 3]
    for name in ("job.resolved.yaml", "env.json", "train.log", "events.jsonl", "summary.json", "results.csv",
                 "weights/best.pt", "weights/last.pt"):
        assert (run_dir / name).exists(), name
    summary = out["summary"]
    assert summary["epochs_completed"] == 3 and "metrics/mAP50-95(B)" in summary["metrics"]
    assert summary["xla"]["xla/compile_count"] >= 1


def test_tpu_cores_that_are_not_there_are_refused_before_anything_is_written(tmp_path):
    """`submit --devices tpu:8` asks torch_xla for the TPU (in a child process) first: on a machine
    without one, exit 2 with one line saying what was found, and no run directory."""
    job = write_job(tmp_path, data={"synth": {"images": 128, "val_images": 8, "classes": 2, "imgsz": 64, "seed": 1}},
                    reference={"devices": 1, "batch": 16})
    result = run_cli("submit", job, "--devices", "tpu:8", cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "'tpu:8' needs a TPU; torch_xla found none here" in lines[0], result.stderr
    assert not (tmp_path / "runs").exists()


def test_a_sweep_on_xla_reports_each_epoch_and_prunes(tmp_path):
    """Sweep trials on `xla:cpu` get the trial callback by name like any worker (job.resolved.yaml's
    `callbacks`): cls 50 crosses the pruner's threshold on val/cls_loss after epoch 1 and is pruned
    there, cls 0.5 completes both epochs with its objective. (This tiny model at 32 px matches few
    boxes: its box loss is near 0 on CPU and XLA alike, so the class loss is the one that separates.)"""
    from conftest import write_sweep

    tiny = {"model": str(REPO / "tests" / "assets" / "tiny-det.yaml"), "imgsz": 32,
            "target": {"devices": "xla:cpu"}}
    sweep = write_sweep(tmp_path, study="xla-sweep", budget={"n_trials": 2}, job_changes=tiny,
                        space={"hyp": {"cls": {"choices": [0.5, 50.0]}}}, objective={"metric": "val/cls_loss"},
                        enqueue=[{"hyp": {"cls": 0.5}}, {"hyp": {"cls": 50.0}}])
    result = run_cli("sweep", sweep, "--json", cwd=tmp_path, timeout=900, env={"PJRT_DEVICE": "CPU"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    trials = json.loads(result.stdout)["trials"]
    assert [(t["state"], t["epochs"]) for t in trials] == [("COMPLETE", 2), ("PRUNED", 1)], trials
    assert trials[0]["values"][0] < 10.0  # val/cls_loss, below the threshold
