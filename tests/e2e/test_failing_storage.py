"""Databases and disks that fail, on real filesystems: a read-only registry still lists its runs
(a read-only bind mount of a colleague's runs folder), a damaged registry or study file is one line
naming the file and the fix, and a disk that fills up mid-run leaves the previous checkpoint whole,
says the disk is full, and `resume` finishes the run once there is space."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import DEFAULT_WANDB, run_cli, wandb_epochs, write_job
from conftest import write_sweep
from orchestrator.registry import Registry
from orchestrator.rundir import trained_epochs
from orchestrator.rundir.checkpoints import results_epochs

NO_ENV_REGISTRY = {"YOLO_ORCH_REGISTRY": ""}


def _one_line(result, *expected: str) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.slow
def test_read_only_registry_lists_but_refuses_to_start(tmp_path, read_only_view):
    job = write_job(tmp_path)
    runs = tmp_path / "runs"
    assert run_cli("submit", job, "--set", f"runs_dir={runs}", cwd=tmp_path, env=NO_ENV_REGISTRY).returncode == 0
    ro = read_only_view(runs)
    listed = run_cli("runs", "--runs-dir", ro, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert listed.returncode == 0, listed.stderr
    row = json.loads(listed.stdout)[0]
    assert row["state"] == "finished"
    shown = run_cli("show", row["id"], "--runs-dir", ro, cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert shown.returncode == 0 and row["id"] in shown.stdout, shown.stderr
    before = sorted(p.name for p in (runs / "tiny").iterdir())
    started = run_cli("submit", job, "--set", f"runs_dir={ro}", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert started.returncode == 1
    _one_line(started, "registry.db is read-only here", "choose a writable runs_dir")
    assert sorted(p.name for p in (runs / "tiny").iterdir()) == before  # nothing half-written


def test_damaged_registry_is_one_line(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "registry.db").write_bytes(b"not a database, just bytes " * 400)
    for args in (("runs", "--runs-dir", runs), ("submit", write_job(tmp_path), "--set", f"runs_dir={runs}")):
        result = run_cli(*args, cwd=tmp_path, env=NO_ENV_REGISTRY)
        assert result.returncode == 1
        _one_line(result, f"registry {runs / 'registry.db'} is damaged", "move it aside")
    assert not (runs / "tiny").exists()


def test_damaged_study_file_is_one_line(tmp_path):
    sweep = write_sweep(tmp_path)
    bad = tmp_path / "study.db"
    bad.write_bytes(b"\x00garbage" * 2000)
    result = run_cli("sweep", sweep, "--storage", f"sqlite:///{bad}", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert result.returncode != 0
    _one_line(result, f"study file {bad}", "damaged", "move it aside")


@pytest.mark.slow
def test_full_disk_keeps_the_last_checkpoint_and_resume_finishes(tmp_path, small_disk):
    """40 MiB hold epoch 1's last.pt (about 26 MB with its optimizer state) but not a second one
    beside it: epoch 1's checkpoint must survive whole, and the run must say the disk is full. With the
    W&B default (offline), the resumed run holds each epoch once in events.jsonl, results.csv and W&B, and the
    registry agrees (the chaos campaign's disk-full fault, which the suite's short campaign leaves to this test)."""
    # yolo11n: its checkpoint's size is the point
    job = write_job(tmp_path, epochs=3, model="yolo11n.yaml", wandb=DEFAULT_WANDB)
    runs = small_disk.path
    r = run_cli("submit", job, "--json", "--set", f"runs_dir={runs}", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "failed" and "the disk is full" in out["note"] and "No space left on device" in out["note"]
    assert f"yolo-orch resume {out['run_id']}" in out["note"]
    last = Path(out["run_dir"]) / "weights" / "last.pt"
    ckpt = torch.load(last, map_location="cpu", weights_only=False)  # whole: not truncated
    assert ckpt["epoch"] == 0 and ckpt["optimizer"] is not None
    assert not list(last.parent.glob(".*.tmp"))  # no temporary file left behind

    small_disk.resize(400)
    resumed = run_cli("resume", out["run_id"], "--runs-dir", runs, "--json", cwd=tmp_path, env=NO_ENV_REGISTRY)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    done = json.loads(resumed.stdout)
    assert done["state"] == "finished" and done["resumed_from_epoch"] == 2
    run_dir = Path(done["run_dir"])
    assert trained_epochs(run_dir / "events.jsonl") == [1, 2, 3] and results_epochs(run_dir) == [1, 2, 3]
    assert wandb_epochs(run_dir) == [1, 2, 3]
    with Registry.open(runs) as reg:
        row = reg.get(out["run_id"])
    assert row.state == "finished" and row.epochs_done == 3


def test_a_full_disk_is_named_whatever_the_writer_said(small_disk):
    """torch's checkpoint writer fails on a full disk with `PytorchStreamWriter failed writing file ...:
    file write failed` (no errno): the note still says the disk is full (bench/chaos.py's disk-full fault
    found it), from the free space where the run writes."""
    from orchestrator.rundir import ResolvedRun
    from orchestrator.runner import failure_note

    run_dir = small_disk.path / "run"
    (run_dir / "weights").mkdir(parents=True)
    ResolvedRun.from_dict({"run_id": "r1", "job": {"name": "j", "epochs": 5},
                           "plan": {"devices": "cpu", "train_args": {"epochs": 5}}}).save(run_dir)
    (run_dir / "weights" / "last.pt").write_bytes(b"x")
    (run_dir / "train.log").write_text("RuntimeError: [enforce fail at inline_container.cc:858] . PytorchStreamWriter "
                                       "failed writing file data.pkl: file write failed\n")
    assert "the disk is full" not in failure_note("r1", run_dir, 1, 3)
    with open(small_disk.path / "filler", "wb") as f:
        try:
            while f.write(b"\0" * (1 << 20)):
                pass
        except OSError:
            pass  # full
    note = failure_note("r1", run_dir, 1, 3)
    assert note.startswith("the disk is full (RuntimeError:") and "free space on it, then resume" in note
    assert "3 of 5 epochs done; `yolo-orch resume r1` continues it" in note
