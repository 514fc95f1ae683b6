"""Slurm for real: two nodes on this machine, on loopback (Debian's slurm-wlm and munge,
scripts/slurm_cluster.sh: installed when missing, started for this module, stopped after it; each node a
slurmd of its own).

`yolo-orch slurm`: the scripts are submitted with sbatch as printed: a 1-node x 2-process gloo training to
the end; `scontrol requeue` of a running job; a job whose time limit is shorter than its training. Both
requeued jobs must end with the same run finished and no epoch trained twice.

`target.launcher: slurm` (`submit --launcher slurm`): the runner here submits each attempt as an sbatch
job and watches it; a time limit shorter than the training goes on in a new job; Ctrl-C cancels the job;
a runner killed -9 leaves its job training, and a resume is refused until it is cancelled; a `2xcpu:1`
run spans both nodes in one job.

Slurm holds a requeued job for about two minutes (Reason=BeginTime) before it may start again;
the tests shorten that wait with `scontrol update JobId=N StartTime=now`, as an admin could."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from conftest import (DEFAULT_WANDB, REPO, TINY_JOB, cli_env, no_links, read_events, run_cli, started, wandb_epochs,
                      write_job)
from orchestrator.harness.cli import start_cli, submit_json
from orchestrator.harness.runs import wait_first_epoch, wait_for
from orchestrator.harness.services import SlurmCluster, slurm_command, slurm_job
from orchestrator.registry import Registry

# one Slurm cluster at a time on this machine (the chaos campaign starts its own): one test worker runs both
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("slurm")]
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


@pytest.fixture(scope="module")
def cluster() -> SlurmCluster:
    cluster = started(SlurmCluster, 2)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def slurm(cluster) -> dict:
    """The environment of a command on the cluster (its SLURM_CONF; the runs folder's own registry)."""
    return cluster.env(cli_env({"YOLO_ORCH_REGISTRY": ""}))


def _script(tmp_path: Path, env: dict, epochs: int, *flags: str, images: int = 16, **changes) -> Path:
    data = {"synth": {**TINY_JOB["data"]["synth"], "images": images}}
    job = write_job(tmp_path, TINY_JOB, epochs=epochs, target={"devices": "cpu:2"}, imgsz=32, data=data,
                    model=str(REPO / "tests" / "assets" / "tiny-det.yaml"), **changes)
    out = run_cli("slurm", job, *flags, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    script = tmp_path / "job.sbatch"
    script.write_text(out.stdout)
    return script


def _wait_end(env: dict, job_id: str, timeout: float = 600) -> dict:
    """The job's record once it ended; a requeued job held by Slurm is let go at once."""
    deadline, held_since = time.time() + timeout, None
    while time.time() < deadline:
        job = slurm_job(env, job_id)
        if job["JobState"] in ENDED:
            return job
        held = job["JobState"] == "PENDING" and job.get("Reason") == "BeginTime"
        held_since = (held_since or time.time()) if held else None
        if held and time.time() - held_since > 5:  # the old allocation's cleanup first: else "credential revoked"
            slurm_command(env, "scontrol", "update", f"JobId={job_id}", "StartTime=now")
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not end within {timeout} s: {slurm_job(env, job_id)}")


def _run(tmp_path: Path, job_id: str) -> tuple[dict, Path]:
    with Registry.open(tmp_path / "runs") as reg:
        row = reg.get(f"slurm-{job_id}")
    assert row is not None, f"no run slurm-{job_id} in the registry"
    return row, Path(row.run_dir)


def test_an_option_slurm_rejects_is_slurms_own_message(slurm, tmp_path):
    """`yolo-orch slurm` asks `sbatch --test-only` (nothing is submitted) where Slurm is installed."""
    job = write_job(tmp_path, TINY_JOB, target={"devices": "cpu:2"})
    out = run_cli("slurm", job, "--partition", "nope", cwd=tmp_path, env=slurm)
    assert out.returncode == 2 and out.stdout == "", out.stdout
    assert out.stderr.strip().startswith("sbatch: Slurm rejects the script: ")
    assert "Invalid partition name specified" in out.stderr
    out = run_cli("slurm", job, "--time", "bogus", cwd=tmp_path, env=slurm)  # refused before Slurm is asked
    assert out.returncode == 2 and out.stdout == "" and "--time: 'bogus' is not a Slurm time" in out.stderr
    assert slurm_command(slurm, "squeue", "-h") == ""  # nothing was submitted


def test_an_sbatch_script_trains_on_two_processes_to_the_end(slurm, tmp_path):
    script = _script(tmp_path, slurm, 2)
    job_id = slurm_command(slurm, "sbatch", "--parsable", str(script))
    job = _wait_end(slurm, job_id)
    log = (tmp_path / f"tiny-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", log[-3000:]
    row, run_dir = _run(tmp_path, job_id)
    assert row.state == "finished" and row.epochs_done == 2 and row.devices == "cpu:2"
    starts = [e for e in read_events(run_dir) if e["event"] == "train_start"]
    assert [s["world_size"] for s in starts] == [2]  # torchrun, gloo: 2 ranks


def test_a_requeued_job_resumes_its_run(slurm, tmp_path):
    """`scontrol requeue` while epoch 2 trains: Slurm stops the step (SIGTERM), the orchestrator
    marks the run killed; the requeued job resumes the same run from its last checkpoint and continues
    its W&B run (the default: offline), each epoch once."""
    script = _script(tmp_path, slurm, 6, wandb=DEFAULT_WANDB)
    job_id = slurm_command(slurm, "sbatch", "--parsable", str(script))
    deadline = time.time() + 300
    while not list((tmp_path / "runs").glob("tiny/*/events.jsonl")) or \
            '"event": "epoch"' not in next((tmp_path / "runs").glob("tiny/*/events.jsonl")).read_text():
        assert time.time() < deadline and slurm_job(slurm, job_id)["JobState"] not in ENDED, "no epoch ended"
        time.sleep(0.3)
    slurm_command(slurm, "scontrol", "requeue", job_id)
    job = _wait_end(slurm, job_id)
    log = (tmp_path / f"tiny-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", log[-3000:]
    assert "resuming tiny/slurm-" in log
    row, run_dir = _run(tmp_path, job_id)
    assert row.state == "finished" and row.epochs_done == 6
    events = read_events(run_dir)
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2, 3, 4, 5, 6]  # none twice
    assert wandb_epochs(run_dir) == [1, 2, 3, 4, 5, 6] and not no_links(run_dir)
    starts = [e["start_epoch"] for e in events if e["event"] == "train_start"]
    assert len(starts) == 2 and starts[0] == 0 and starts[1] >= 1


def test_a_time_limit_shorter_than_the_training_requeues_until_done(slurm, tmp_path):
    """--time 1 (minute), warned 20 s before: every allocation ends with SIGUSR1, the script requeues
    the job, and the next allocation resumes, until all epochs are done."""
    # Epoch 2 is held 50 s once (a test fault hook), so the first allocation's signal, at most 40 s into
    # it, lands mid-run on any machine; the next allocation trains the rest in seconds. (A training of
    # fixed length instead took 55 s on a Zen 4 and 5 allocations, 300 s, on a loaded Zen 3.)
    script = _script(tmp_path, slurm, 6, "--time", "1", "--warn-seconds", "20")
    env = {**slurm, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=50,once=1"}
    job_id = slurm_command(env, "sbatch", "--parsable", str(script))
    job = _wait_end(slurm, job_id, timeout=900)
    log = (tmp_path / f"tiny-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED", log[-3000:]
    assert int(job["Restarts"]) >= 1 and "the time limit is near: requeueing job" in log, log[-3000:]
    row, run_dir = _run(tmp_path, job_id)
    assert row.state == "finished" and row.epochs_done == 6
    events = read_events(run_dir)
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == list(range(1, 7))  # none twice
    # Slurm may warn up to 60 s early, so an allocation can end before its first epoch (CI saw it):
    # each start must resume exactly where the last stopped, whatever the timing; a resume after
    # finished epochs, for certain, is test_a_requeued_job_resumes_its_run's
    done, starts = 0, []
    for event in events:
        done += event["event"] == "epoch"
        if event["event"] == "train_start":
            starts.append((event["start_epoch"], done))
    assert starts and all(start == before for start, before in starts), starts


def test_a_stalled_run_requeues_its_job_and_resumes(slurm, tmp_path):
    """Rank 1 hangs in epoch 2 (a test fault hook, once): the watchdog stops the run after its
    stall_timeout, submit exits 124, the script requeues the job, and the next allocation resumes."""
    script = _script(tmp_path, slurm, 3, stall_timeout=15)
    env = {**slurm, "YOLO_ORCH_FAULT_HANG": "epoch=2,batch=1,rank=1"}
    job_id = slurm_command(env, "sbatch", "--parsable", str(script))
    job = _wait_end(slurm, job_id)
    log = (tmp_path / f"tiny-{job_id}.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", log[-3000:]
    assert "the run stalled (stacks in its run directory): requeueing job" in log
    row, run_dir = _run(tmp_path, job_id)
    assert row.state == "finished" and any("stalled: no rank advanced" in n.text for n in row.notes)
    assert [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"] == [1, 2, 3]
    assert (run_dir / "stacks" / "rank1.txt").read_text().count("faults.py") >= 1


def test_a_sweep_array_shares_one_postgres_study_and_retries_a_cancelled_tasks_trial(slurm, tmp_path, pg_url):
    """`yolo-orch slurm SWEEP --workers 2 --storage postgresql://...`: two array tasks, one sweep worker
    each, on one study in a real PostgreSQL. The task running a trial that has finished an epoch is
    cancelled (scancel): its trial ends FAIL, the other task runs the retry, and the study reaches
    its 3 trials."""
    import optuna
    import yaml

    from orchestrator.sweep.study import check_url, make_storage

    write_job(tmp_path, TINY_JOB, epochs=3, imgsz=32, model=str(REPO / "tests" / "assets" / "tiny-det.yaml"))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({
        "study": "arr", "base": "job.yaml", "space": {"hyp": {"lr0": {"low": 1e-3, "high": 1e-2, "log": True}}},
        "pruner": "none", "budget": {"n_trials": 3}, "heartbeat": {"interval": 1, "grace_period": 4, "max_retry": 2}}))
    out = run_cli("slurm", tmp_path / "sweep.yaml", "--workers", "2", "--storage", pg_url, cwd=tmp_path, env=slurm)
    assert out.returncode == 0, out.stderr
    assert "#SBATCH --array=0-1" in out.stdout and "#SBATCH --cpus-per-task=1" in out.stdout
    (tmp_path / "sweep.sbatch").write_text(out.stdout)
    # every trial holds 5 s at the start of epoch 2: the cancel lands inside the trial, not after it
    job_id = slurm_command({**slurm, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=5"}, "sbatch", "--parsable",
                    str(tmp_path / "sweep.sbatch"))
    storage = make_storage(check_url(pg_url))
    victim, deadline = None, time.time() + 300
    while victim is None and time.time() < deadline:
        try:
            running = optuna.load_study(study_name="arr", storage=storage).get_trials(
                states=(optuna.trial.TrialState.RUNNING,))
        except KeyError:  # the study is not created yet
            running = []
        for t in running:
            events = Path(t.user_attrs.get("run_dir", "/nonexistent")) / "events.jsonl"
            if events.exists() and '"event": "epoch"' in events.read_text():
                environ = Path(f"/proc/{t.user_attrs['cli_pid']}/environ").read_bytes().split(b"\0")
                task = next(e.split(b"=", 1)[1].decode() for e in environ if e.startswith(b"SLURM_ARRAY_TASK_ID="))
                victim = (t.number, task)
        time.sleep(0.5)
    assert victim is not None, "no array task reached the middle of a trial"
    slurm_command(slurm, "scancel", f"{job_id}_{victim[1]}")
    other = f"{job_id}_{1 - int(victim[1])}"
    assert _wait_end(slurm, other)["JobState"] == "COMPLETED", (tmp_path / f"arr-{job_id}_{other[-1]}.out").read_text()[-3000:]
    assert slurm_job(slurm, f"{job_id}_{victim[1]}")["JobState"] == "CANCELLED"
    trials = optuna.load_study(study_name="arr", storage=storage).get_trials()
    states = {t.number: t.state.name for t in trials}
    assert states[victim[0]] == "FAIL" and sum(s == "COMPLETE" for s in states.values()) >= 3, states
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == victim[0]]
    assert retried and retried[0].state.name == "COMPLETE", states  # the cancelled trial ran again, elsewhere


def _placed_job(tmp_path: Path, epochs: int, devices: str = "cpu:2", **changes) -> Path:
    """A job placed on Slurm, W&B as users have it by default (offline here)."""
    data = {"synth": {**TINY_JOB["data"]["synth"], "images": 16}}
    return write_job(tmp_path, TINY_JOB, epochs=epochs, target={"devices": devices, "launcher": "slurm"}, imgsz=32,
                     data=data, model=str(REPO / "tests" / "assets" / "tiny-det.yaml"), wandb=DEFAULT_WANDB, **changes)


def _epochs(run_dir: Path) -> list[int]:
    return [e["epoch"] for e in read_events(run_dir) if e["event"] == "epoch"]


def test_a_run_placed_on_slurm_goes_on_in_a_new_job_after_its_time_limit(slurm, tmp_path):
    """Each attempt one sbatch job that the runner here watches. Epoch 2 is held 100 s once, past the job's
    1-minute limit: Slurm ends job 1 (TIMEOUT), the runner submits a second job that continues from the last
    checkpoint, and the run finishes with each epoch once in events.jsonl, results.csv and W&B. A secret in
    the submitting shell reaches no script."""
    job = _placed_job(tmp_path, 4, slurm={"time": 1})
    env = {**slurm, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=100,once=1", "PGPASSWORD": "pg-secret-4711"}
    result = submit_json(job, cwd=tmp_path, env=env)
    run_dir = Path(result["run_dir"])
    log = (run_dir / "train.log").read_text()
    assert result["state"] == "finished", log[-3000:]
    jobs = (run_dir / "slurm").glob("attempt-*.sbatch")
    assert sorted(p.name for p in jobs) == ["attempt-1.sbatch", "attempt-2.sbatch"]
    assert "ended TIMEOUT: the next attempt continues from epoch 2/4" in log, log[-3000:]
    with Registry.open(tmp_path / "runs") as reg:
        row = reg.get(result["run_id"])
    assert row.state == "finished" and row.epochs_done == 4 and row.attempts == 2 and row.worker_pid == 0
    assert _epochs(run_dir) == [1, 2, 3, 4] and wandb_epochs(run_dir) == [1, 2, 3, 4]
    rows = (run_dir / "results.csv").read_text().strip().splitlines()[1:]
    assert [int(float(r.split(",")[0])) for r in rows] == [1, 2, 3, 4]
    assert [e["start_epoch"] for e in read_events(run_dir) if e["event"] == "train_start"] == [0, 1]
    for script in (run_dir / "slurm").glob("attempt-*.sbatch"):
        assert "pg-secret-4711" not in script.read_text()


def test_ctrl_c_cancels_the_job_and_a_runner_killed_leaves_one_that_blocks_a_resume(slurm, tmp_path):
    """Ctrl-C of `submit --launcher slurm`: the job is cancelled (scancel), the run killed, resumable. Its
    resume trains in a new Slurm job; that resume killed -9 leaves its job training, so another resume is
    refused, naming the job, until it is cancelled; then the run finishes, each epoch once."""
    job = _placed_job(tmp_path, 4)
    proc = start_cli("submit", job, "--launcher", "slurm", cwd=tmp_path,
                     env={**slurm, "YOLO_ORCH_FAULT_SLEEP": "epoch=2,seconds=120,once=1"})
    run_dir = wait_first_epoch(tmp_path / "runs", proc)
    run_id = run_dir.name
    first = (run_dir / "slurm" / "job_id").read_text().strip()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=180) == 130, proc.stderr.read()[-3000:]
    assert slurm_job(slurm, first)["JobState"] == "CANCELLED"
    with Registry.open(tmp_path / "runs") as reg:
        assert reg.get(run_id).state == "killed"

    proc = start_cli("resume", run_id, cwd=tmp_path, env={**slurm, "YOLO_ORCH_FAULT_SLEEP": "epoch=3,seconds=120"})
    assert wait_for(lambda: _epochs(run_dir) == [1, 2] or proc.poll() is not None, 300), "the resume trained no epoch"
    second = (run_dir / "slurm" / "job_id").read_text().strip()
    assert second != first and proc.poll() is None, proc.stderr.read()[-3000:]
    proc.kill()  # the runner only (kill -9): its Slurm job trains on
    proc.wait(timeout=30)
    assert slurm_job(slurm, second)["JobState"] == "RUNNING"
    refused = run_cli("resume", run_id, cwd=tmp_path, env=slurm)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert f"its Slurm job {second} still runs (its runner is gone); `scancel {second}` first" in refused.stderr

    slurm_command(slurm, "scancel", second)
    _wait_end(slurm, second)
    out = run_cli("resume", run_id, "--json", cwd=tmp_path, env=slurm, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["state"] == "finished"
    assert _epochs(run_dir) == [1, 2, 3, 4] and wandb_epochs(run_dir) == [1, 2, 3, 4]
    assert len(list((run_dir / "slurm").glob("attempt-*.sbatch"))) == 3


def test_a_run_placed_on_slurm_spans_two_nodes_in_one_job(slurm, tmp_path):
    """`2xcpu:1`: one job of two nodes, one task each; every node's torchrun takes its rank from
    SLURM_NODEID and meets node 0 (the first host); both train in the one run folder on the shared disk."""
    job = _placed_job(tmp_path, 2, devices="2xcpu:1")
    result = submit_json(job, cwd=tmp_path, env=slurm)
    run_dir = Path(result["run_dir"])
    assert result["state"] == "finished", (run_dir / "train.log").read_text()[-3000:]
    record = slurm_job(slurm, (run_dir / "slurm" / "job_id").read_text().strip())
    assert record["NumNodes"] == "2" and record["JobState"] == "COMPLETED"
    starts = [e for e in read_events(run_dir) if e["event"] == "train_start"]
    assert [s["world_size"] for s in starts] == [2] and _epochs(run_dir) == [1, 2]
    assert (run_dir / "rank0.log").is_file() and (run_dir / "rank1.log").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "finished" and summary["metrics"]  # rank 0's, not another node's stand-in


def test_a_run_placed_on_slurm_stops_before_its_limit_and_goes_on_in_the_next_job(slurm, tmp_path):
    """The job's script gives the training a deadline, the job's end less slurm.margin: epoch 1 is held 20 s, so
    after it the next epoch, reckoned as long, would end past the deadline; the training stops there, resumable, the job ends
    COMPLETED before its limit, and the next job continues from the copy the deadline kept (the final validation
    strips last.pt). Each epoch once in events.jsonl and W&B."""
    job = _placed_job(tmp_path, 2, slurm={"time": 1, "margin": 15})
    result = submit_json(job, cwd=tmp_path, env={**slurm, "YOLO_ORCH_FAULT_SLEEP": "epoch=1,seconds=20"})
    run_dir = Path(result["run_dir"])
    log = (run_dir / "train.log").read_text()
    assert result["state"] == "finished", log[-3000:]
    assert "stopped at its deadline: the next attempt continues from epoch 2/2" in log, log[-3000:]
    first = slurm_job(slurm, log.split("Slurm job ", 1)[1].split(" ", 1)[0])
    assert first["JobState"] == "COMPLETED"  # stopped by itself before the limit, not ended by Slurm
    assert _epochs(run_dir) == [1, 2] and wandb_epochs(run_dir) == [1, 2]
    assert [e["start_epoch"] for e in read_events(run_dir) if e["event"] == "train_start"] == [0, 1]
    with Registry.open(tmp_path / "runs") as reg:
        assert reg.get(result["run_id"]).attempts == 2
