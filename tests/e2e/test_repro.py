"""Reproducibility: the same job (seed, deterministic: true) trained twice on CPU gives
identical per-epoch losses and final metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli, write_job


def _run(tmp_path: Path, job: Path) -> tuple[dict, list[dict]]:
    r = run_cli("submit", job, "--json", cwd=tmp_path, env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    run_dir = Path(out["run_dir"])
    epochs = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    epochs = [e["metrics"] for e in epochs if e["event"] == "epoch"]
    return out["summary"]["metrics"], epochs


@pytest.mark.slow
def test_same_job_twice_gives_identical_metrics(tmp_path):
    job = write_job(tmp_path, epochs=2, seed=3, deterministic=True)
    final_a, epochs_a = _run(tmp_path, job)
    final_b, epochs_b = _run(tmp_path, job)
    assert len(epochs_a) == 2
    assert final_a == final_b
    assert epochs_a == epochs_b  # train/val losses to 6 decimals, lr, mAP
    assert epochs_a[0]["train/box_loss"] > 0


def test_seed_and_deterministic_reach_ultralytics(tmp_path):
    r = run_cli("submit", write_job(tmp_path, seed=7, deterministic=False), "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    args = json.loads(r.stdout)["train_args"]
    assert args["seed"] == 7 and args["deterministic"] is False
