"""Issue 60: `resume` right after a kill -9 of a run's orchestrator, while its training process still winds down
(as a scheduler kills and resumes): the run is not refused as "still running" under a dead pid; the resume waits
a bounded time for the training process, stops what is left, records the run killed and goes on. Real processes
stand in for the training process; no training."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from orchestrator import resume
from orchestrator.errors import RunStateError
from orchestrator.registry import Registry
from orchestrator.rundir import process_alive, process_identity
from test_resolved_contract import planned_run


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def _running_row(runs, worker: subprocess.Popen, orchestrator: int) -> dict:
    run_dir = planned_run(runs, state="running")
    with Registry.open(runs) as reg:
        reg.update(run_dir.name, pid=orchestrator, worker_pid=worker.pid)
        return reg.get(run_dir.name)


def test_a_training_process_winding_down_is_waited_for_then_the_run_is_killed_and_resumable(tmp_path):
    worker = subprocess.Popen(["sleep", "2"], start_new_session=True)
    row = _running_row(tmp_path / "runs", worker, _dead_pid())
    assert row.state == "running"  # its training process still runs: not vanished yet
    started = time.monotonic()
    settled = resume.settle_orphans(row)
    assert settled.state == "killed" and 1 < time.monotonic() - started < resume.ORPHAN_WAIT_S
    assert worker.poll() is not None
    with Registry.open(tmp_path / "runs") as reg:
        assert reg.get(row.id).state == "killed"


def test_a_training_process_that_outlives_the_wait_is_stopped(tmp_path, monkeypatch):
    monkeypatch.setattr(resume, "ORPHAN_WAIT_S", 0.5)
    worker = subprocess.Popen(["sleep", "300"], start_new_session=True)
    identity = process_identity(worker.pid)
    row = _running_row(tmp_path / "runs", worker, _dead_pid())
    assert resume.settle_orphans(row).state == "killed"
    worker.wait(timeout=15)
    assert not process_alive(worker.pid, identity)


def test_a_run_whose_orchestrator_lives_is_refused_naming_the_live_process(tmp_path):
    worker = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        row = _running_row(tmp_path / "runs", worker, os.getpid())
        assert resume.settle_orphans(row).state == "running"
        with pytest.raises(RunStateError) as refused:
            resume.refuse_state(row)
        assert f"(pid {os.getpid()}, training pid {worker.pid})" in str(refused.value)
    finally:
        worker.kill()
