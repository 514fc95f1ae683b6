"""`yolo-orch sweep --devices-per-trial 1` on this machine's CPU cores (the stand-in for GPUs, which
get CUDA_VISIBLE_DEVICES the same way): one worker per core, each trial's processes pinned to its
worker's core, the summary naming the group that ran each trial."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli, write_sweep

pytestmark = pytest.mark.slow


def test_each_worker_and_its_trials_run_on_their_own_core(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs 2 CPU cores")
    sweep = write_sweep(tmp_path, study="pinned", budget={"n_trials": len(cores)}, pruner={"name": "none"},
                        job_changes={"epochs": 1})
    r = run_cli("sweep", sweep, "--devices-per-trial", "1", "--json", cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    trials = json.loads(r.stdout)["trials"]
    assert [t["state"] for t in trials] == ["COMPLETE"] * len(cores)
    groups = {t["device_group"] for t in trials}
    assert len(groups) > 1 and groups <= {f"CPU {c}" for c in cores}, groups  # both workers ran trials
    for t in trials:
        env = json.loads((Path(t["run_dir"]) / "env.json").read_text())
        assert env["cpu_affinity"] == [int(t["device_group"].split()[1])], (t["device_group"], env["cpu_affinity"])
    bad = run_cli("sweep", sweep, "--devices-per-trial", str(len(cores) + 1), cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        f"--devices-per-trial: {len(cores) + 1} does not divide the {len(cores)} CPU cores visible here "
        f"({','.join(map(str, cores))})")
