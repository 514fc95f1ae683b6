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
