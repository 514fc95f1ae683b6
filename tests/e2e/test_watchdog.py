"""The stall watchdog on a real 2-rank gloo run: a fault hook makes rank 1 hang before its
forward pass in epoch 2 while rank 0 waits in the gradient all-reduce. The run must end `stalled`
within the job's stall_timeout, name rank 1, leave every rank's Python stack in stacks/, leave no
process behind, and `yolo-orch resume` must finish it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conftest import TINY_JOB, processes_mentioning, run_cli, write_job
from orchestrator.registry import Registry

pytestmark = pytest.mark.slow
NO_ENV_REGISTRY = {"YOLO_ORCH_REGISTRY": ""}


def test_a_hung_rank_ends_the_run_stalled_with_stacks_and_resume_finishes_it(tmp_path):
    job = write_job(tmp_path, TINY_JOB, epochs=3, target={"devices": "cpu:2"}, stall_timeout=15)
    started = time.time()
    r = run_cli("submit", job, "--json", cwd=tmp_path, timeout=600,
                env={**NO_ENV_REGISTRY, "YOLO_ORCH_FAULT_HANG": "epoch=2,batch=1,rank=1"})
    elapsed = time.time() - started
    assert r.returncode == 124, r.stdout[-2000:] + r.stderr[-2000:]  # stalled (as `timeout` exits)
    out = json.loads(r.stdout)
    run_id, run_dir = out["run_id"], Path(out["run_dir"])
    assert out["state"] == "stalled", out
    assert "rank 1 stopped first, at epoch 2 batch 1 (batch)" in out["note"], out["note"]
    assert elapsed < 15 + 120, f"the stall took {elapsed:.0f} s to end the run"
    stacks = {p.name: p.read_text() for p in (run_dir / "stacks").glob("rank*.txt")}
    assert sorted(stacks) == ["rank0.txt", "rank1.txt"]
    assert "tests/helpers/faults.py" in stacks["rank1.txt"]  # rank 1: in the hook's sleep, before its forward
    assert "faults.py" not in stacks["rank0.txt"] and "in backward" in stacks["rank0.txt"]  # rank 0: all-reduce
    assert processes_mentioning(str(run_dir)) == []  # nothing survives
    with Registry.open(tmp_path / "runs") as reg:
        row = reg.get(run_id)
    assert row.state == "stalled" and row.epochs_done == 1
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["rank"] for e in events if e["event"] == "stalled"] == [1]

    r = run_cli("resume", run_id, "--json", cwd=tmp_path, timeout=600, env=NO_ENV_REGISTRY)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert json.loads(r.stdout)["state"] == "finished"  # the hang fired once (a marker file)
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2, 3]
