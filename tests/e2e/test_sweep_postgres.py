"""Distributed sweep on a real PostgreSQL server: two `yolo-orch sweep` commands (as two
machines would) share one study; one is killed with SIGKILL on its whole process group in
the middle of a trial. The heartbeat turns its trial FAIL (not stuck RUNNING), the trial
is retried, and the study still reaches its n_trials COMPLETE or PRUNED trials.

The fixture creates and drops its own database on 127.0.0.1:5432 (user postgres, trust
auth; YOLO_ORCH_PG_URL overrides the server URL). Where no server is reachable the test
skips with the reason, except in CI (CI=true), where that is a failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import cli_env, processes_mentioning, write_job

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
def start_sweep(sweep: Path, url: str, cwd: Path, log: Path, env: dict | None = None) -> subprocess.Popen:
    """One `yolo-orch sweep` command in its own session (its own process group, as on its own machine)."""
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", str(sweep), "--storage", url,
                             "--workers", "1", "--json"], cwd=cwd, env=cli_env(env), stdout=subprocess.PIPE,
                            stderr=open(log, "wb"), start_new_session=True)


def test_two_workers_one_killed_mid_trial(tmp_path, pg_url):
    import optuna

    from orchestrator.sweep.study import check_url, make_storage

    write_job(tmp_path, epochs=3, mlflow={})  # its trials nested in MLflow: the killed one's run is closed
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "study": "pg-sweep",
        "base": "job.yaml",
        "space": {"hyp": {"lr0": {"low": 1e-3, "high": 1e-2, "log": True}}},
        "pruner": "none",
        "budget": {"n_trials": 3},
        "heartbeat": {"interval": 1, "grace_period": 4, "max_retry": 2},
    }))
    # A's trials hold in their second epoch, where A is killed: the tiny model's epochs take a fraction of a second,
    # less than this test's look at the study, and a trial could end before the kill meant for it
    a = start_sweep(sweep, pg_url, tmp_path, tmp_path / "a.log", {"YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=300"})
    time.sleep(2)
    b = start_sweep(sweep, pg_url, tmp_path, tmp_path / "b.log")
    try:
        # wait until A's worker is inside a trial that has finished an epoch
        storage = make_storage(check_url(pg_url))  # postgresql:// -> the installed driver; table-creation races
        victim = None
        deadline = time.time() + 300
        while victim is None and time.time() < deadline:
            assert a.poll() is None, (tmp_path / "a.log").read_text()[-3000:]
            try:
                study = optuna.load_study(study_name="pg-sweep", storage=storage)
                running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
            except KeyError:  # the study is not created yet
                running = []
            for t in running:
                events = Path(t.user_attrs.get("run_dir", "/nonexistent")) / "events.jsonl"
                if t.user_attrs.get("cli_pid") == a.pid and events.exists() and '"event": "epoch"' in events.read_text():
                    victim = t
            time.sleep(0.5)
        assert victim is not None, "worker A never reached the middle of a trial"
        os.killpg(a.pid, signal.SIGKILL)  # the whole command: CLI and its worker
        a.wait(timeout=30)

        out, _ = b.communicate(timeout=600)
    finally:
        for p in (a, b):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert b.returncode == 0, (tmp_path / "b.log").read_text()[-4000:]
    summary = json.loads(out)
    assert summary["reached"] and summary["done"] >= 3, summary["states"]

    study = optuna.load_study(study_name="pg-sweep", storage=storage)
    trials = {t.number: t for t in study.get_trials()}
    assert not [t for t in trials.values() if t.state == optuna.trial.TrialState.RUNNING], "a trial is stuck RUNNING"
    assert trials[victim.number].state == optuna.trial.TrialState.FAIL
    done = [t for t in trials.values() if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(done) >= 3
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == victim.number]
    assert retries and retries[0].params == victim.params, "the killed trial was retried with its parameters"
    assert retries[0].state == optuna.trial.TrialState.COMPLETE
    assert retries[0].user_attrs["cli_pid"] == b.pid

    # the killed trial's MLflow run, left RUNNING by its training process, was closed when the trial failed stale
    from orchestrator.harness.tracking import mlflow_client, mlflow_record

    record = mlflow_record(Path(victim.user_attrs["run_dir"]))
    closed = mlflow_client(f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}").get_run(record["run_id"])
    assert closed.info.status in ("KILLED", "FAILED") and closed.data.tags["optuna.state"] == "FAIL", closed

    # the killed worker's training process did not live on
    deadline = time.time() + 20
    while processes_mentioning(victim.user_attrs["run_dir"]) and time.time() < deadline:
        time.sleep(0.5)
    assert not processes_mentioning(victim.user_attrs["run_dir"])

    registry = tmp_path / "runs" / "registry.db"
    if registry.exists():
        from orchestrator.registry import Registry

        with Registry(registry) as reg:
            row = reg.get(victim.user_attrs["run_id"])
        assert row.state == "killed", row
