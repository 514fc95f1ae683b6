"""W&B: with no API key the run logs offline; the files wandb wrote hold the resolved
job, every scaled value with its original, per-epoch and final metrics; no key leaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import run_cli, write_job
from wandb_records import read_run

pytestmark = pytest.mark.slow
FAKE_KEY = "local-0123456789abcdef0123456789abcdef01234567"


def test_offline_without_key(tmp_path):
    job = write_job(tmp_path, epochs=2, wandb={"project": "orch-test", "group": "g1", "tags": ["t"]},
                    target={"devices": "cpu", "batch": 4})
    result = run_cli("submit", job, "--json", cwd=tmp_path, env={"WANDB_API_KEY": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    files = list(run_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, list(run_dir.rglob("*"))
    run = read_run(files[0])

    cfg = run["config"]
    assert cfg["job"]["name"] == "tiny"
    assert cfg["reference"] == {"devices": "1", "batch": 8, "nbs": 64}
    assert cfg["target"]["devices"] == "cpu"
    # every scaled value is logged next to its original
    assert cfg["scaled"]["batch"]["passed"] == 4
    assert cfg["scaled"]["lr0"] == {"reference": 0.002, "passed": cfg["train_args"]["lr0"]}
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert cfg["effective"] == resolved["plan"]["scaling"]["effective"]
    assert cfg["effective"]["batch_per_device"] == 4
    assert run["run"].project == "orch-test" and run["run"].run_group == "g1"

    epochs = [row for row in run["history"] if "metrics/mAP50(B)" in row]
    assert [row["epoch"] for row in epochs] == [1, 2]
    assert "final/metrics/mAP50-95(B)" in run["summary"]


def test_key_never_written(tmp_path):
    job = write_job(tmp_path, wandb={"mode": "offline"})
    result = run_cli("submit", job, "--json", cwd=tmp_path, env={"WANDB_API_KEY": FAKE_KEY})
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    assert list(run_dir.glob("wandb/offline-run-*"))
    leaks = [p for p in run_dir.rglob("*") if p.is_file() and FAKE_KEY.encode() in p.read_bytes()]
    assert not leaks, f"API key found in {leaks}"
    assert FAKE_KEY not in result.stdout + result.stderr
