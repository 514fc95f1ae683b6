"""A sweep rides out its database going away: the study's PostgreSQL server (the test's own) is stopped
for a few seconds while two workers are inside trials, then started again. Nothing may die with a
traceback; the study still reaches its trials, none lost or duplicated."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import yaml

from conftest import cli_env, write_job

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
# each trial's training holds 4 s before its epoch 2, so the outage (begun once two epochs are reported) meets an
# epoch's report whatever the machine: on a Zen 4 a trial's three epochs took 1 s, the database's stop longer, and
# a run at 4d35f2b met no outage at all (its trials were starting, whose only storage calls are the heartbeat's)
HELD = {"YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=4"}


def _epochs_reported(pg_url: str) -> int:
    import optuna

    from orchestrator.sweep.study import check_url, make_storage

    try:
        study = optuna.load_study(study_name="outage", storage=make_storage(check_url(pg_url)))
    except Exception:  # not created yet
        return 0
    return sum(len(t.intermediate_values) for t in study.get_trials(deepcopy=False))


def test_two_workers_ride_out_a_database_restart(tmp_path, private_pg):
    write_job(tmp_path, epochs=3)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "study": "outage", "base": "job.yaml",
        "space": {"hyp": {"lr0": {"low": 1e-3, "high": 1e-2, "log": True}}},
        "pruner": "none", "budget": {"n_trials": 4},
        "heartbeat": {"interval": 1, "grace_period": 4, "max_retry": 2},
    }))
    log = tmp_path / "sweep.log"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", str(sweep), "--storage", private_pg.url,
                             "--workers", "2", "--json"], cwd=tmp_path, env=cli_env(HELD), stdout=subprocess.PIPE,
                            stderr=open(log, "wb"))
    try:
        deadline = time.time() + 300
        while _epochs_reported(private_pg.url) < 2 and time.time() < deadline:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        private_pg.stop()
        time.sleep(8)  # longer than the heartbeat's grace period
        private_pg.start()
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert proc.returncode == 0, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    summary = json.loads(out)
    assert summary["reached"] and summary["done"] >= 4, summary["states"]
    # no live trial was failed for the database's absence, and every trial trained once
    assert summary["states"].get("FAIL", 0) == 0, summary["states"]
    logs = "".join(p.read_text() for p in tmp_path.rglob("workers/*.log"))
    assert "Traceback" not in logs, logs[-4000:]
    trainings = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("train.log"))
    felt = logs + trainings  # a training's epoch report, or a worker between trials, met the outage and waited
    assert "storage unreachable while" in felt and "storage back after" in felt, felt[-3000:]
    run_dirs = [t["run_dir"] for t in summary["trials"] if t.get("run_dir")]
    assert len(run_dirs) == len(set(run_dirs)) == len(summary["trials"]), summary["trials"]


def test_a_worker_waits_to_ask_and_to_tell_and_keeps_beating(private_pg):
    """The worker's own path, each step on the real server: the database is down when the worker asks for
    a trial (it waits, then gets one), and down again for longer than the grace period while the trial
    trains (its heartbeat beats on once the database is back, so another worker's stale check does not
    fail it, and the tell lands)."""
    import threading

    import optuna

    from orchestrator.sweep import trial_loop
    from orchestrator.sweep.outage import StaleTrials
    from orchestrator.sweep.study import check_url, make_storage

    class Beat:  # the sweep's heartbeat section
        interval, grace, max_retry = 1, 3, 1

    url = check_url(private_pg.url)
    study = optuna.create_study(study_name="s", storage=make_storage(url, Beat()))
    other = optuna.load_study(study_name="s", storage=make_storage(url, Beat()))  # another worker

    def objective(trial):
        private_pg.stop()
        time.sleep(5)  # > grace: every heartbeat is stale now
        private_pg.start()
        assert StaleTrials(Beat.interval).fail(other, wait=True) == []  # its worker beats again within 1 s
        return 0.5

    private_pg.stop()
    threading.Timer(3, private_pg.start).start()
    started = time.time()
    assert trial_loop.run_trial(study, objective, Beat.interval) == "COMPLETE"
    assert time.time() - started >= 8
    [trial] = study.get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 0.5
