"""`submit --devices xla:cpu` runs the XLA backend through the normal launcher path:
same run directory contract as a CPU run, compile statistics in the summary."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conftest import REPO, run_cli, write_job

pytestmark = [pytest.mark.slow, pytest.mark.xla,
              pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]


def test_submit_on_xla_cpu(tmp_path):
    job = write_job(tmp_path, model=str(REPO / "orchestrator" / "worker" / "xla" / "tiny-det.yaml"), imgsz=32,
                    reference={"devices": 1, "batch": 2})
    result = run_cli("submit", job, "--devices", "xla:cpu", "--json", cwd=tmp_path, env={"PJRT_DEVICE": "CPU"})
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    run_dir = Path(out["run_dir"])
    for name in ("job.resolved.yaml", "env.json", "train.log", "events.jsonl", "summary.json", "results.csv",
                 "weights/best.pt", "weights/last.pt"):
        assert (run_dir / name).exists(), name
    summary = out["summary"]
    assert summary["epochs_completed"] == 1
    assert "metrics/mAP50-95(B)" in summary["metrics"]
    assert summary["xla"]["xla/compile_count"] >= 1
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events].count("epoch") == 1


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
    model = str(REPO / "orchestrator" / "worker" / "xla" / "tiny-det.yaml")
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path), model], env=cli_env({"PJRT_DEVICE": "CPU"}),
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    cached = list((tmp_path / "run" / "xla_cache").iterdir())
    assert cached, "no compiled graph in the cache folder"
