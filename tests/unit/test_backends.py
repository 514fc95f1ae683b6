"""The launchers as backends of one runner (launch/backend.py): every launcher a plan may name has one, and a
process backend's attempt is a real process group that the runner waits on and stops whole."""

from __future__ import annotations

import sys
import time

import pytest

from orchestrator import launch
from orchestrator.launch.backend import Attempt, Backend, ProcessBackend
from orchestrator.rundir import LOG
from orchestrator.rundir.contract import LAUNCHERS


def test_every_launcher_a_plan_names_has_a_backend():
    """(test_resolved_contract ties the names to the contract's LAUNCHERS)"""
    for name in LAUNCHERS:
        backend = launch.backend(name)
        assert isinstance(backend, Backend) and backend.name == name


def _script(code: str):
    return ProcessBackend("test", lambda run_dir: [sys.executable, "-c", code])


def test_an_attempt_is_waited_on_and_its_output_goes_to_the_runs_log(tmp_path):
    attempt = _script("import sys, time; print('hello from the attempt'); time.sleep(0.5); sys.exit(3)").start(
        tmp_path, {})
    assert isinstance(attempt, Attempt) and attempt.wait(0.01) is None  # still training
    deadline = time.time() + 30
    code = None
    while code is None and time.time() < deadline:
        code = attempt.wait(0.2)
    assert code == 3 and attempt.wait(0) == 3
    assert "hello from the attempt" in (tmp_path / LOG).read_text()


def test_stop_ends_the_whole_group(tmp_path):
    """A child that ignores SIGTERM (a rank stuck in a collective) is killed after the grace period, with its
    parent: nothing of the attempt survives."""
    import psutil

    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); print(\"child\", flush=True); time.sleep(600)'])\n"
            "time.sleep(600)\n")
    attempt = _script(code).start(tmp_path, {})
    deadline = time.time() + 30
    while "child" not in (tmp_path / LOG).read_text() and time.time() < deadline:
        time.sleep(0.1)
    group = [attempt.pid] + [p.pid for p in psutil.Process(attempt.pid).children(recursive=True)]
    assert len(group) == 2
    code = attempt.stop(grace_s=0.5)
    assert code != 0 and attempt.wait(0) == code
    time.sleep(0.2)
    assert not [pid for pid in group if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


# A run placed on Slurm: what each way a job ends means for the run (the real jobs: tests/e2e/test_slurm.py)
@pytest.mark.parametrize("state, exit_code, progressed, lost, code, note", [
    ("PENDING", "0:0", False, 0, None, None),
    ("RUNNING", "0:0", True, 0, None, None),
    ("COMPLETING", "0:0", True, 0, None, None),
    ("COMPLETED", "0:0", True, 0, 0, None),
    ("FAILED", "75:0", True, 0, 75, None),  # the worker's own exit code (OOM): the runner re-plans
    ("FAILED", "0:9", False, 0, 137, None),  # killed by a signal: as a shell says it
    ("TIMEOUT", "0:15", True, 0, 256, None),  # an epoch was saved: the next job continues
    ("TIMEOUT", "0:15", False, 0, 1, "reached its time limit (1:00) before an epoch was saved"),
    ("PREEMPTED", "0:15", False, 0, 256, None),
    ("NODE_FAIL", "0:0", False, 1, 256, None),
    ("NODE_FAIL", "0:0", False, 2, 1, "Slurm took 3 jobs in a row away (NODE_FAIL"),
    ("NODE_FAIL", "0:0", True, 2, 256, None),
    ("CANCELLED by 0", "0:15", False, 0, 130, "was cancelled (scancel)"),
    ("OUT_OF_MEMORY", "0:125", True, 0, 1, "ran out of memory"),
])
def test_what_the_end_of_a_slurm_job_means_for_the_run(state, exit_code, progressed, lost, code, note):
    from orchestrator.launch.backend import EXIT_NEXT_SESSION
    from orchestrator.launch.slurm_backend import ending, job_record

    record = job_record(f"JobId=7 JobName=tiny JobState={state.split()[0]} Reason=None ExitCode={exit_code} "
                        "TimeLimit=00:01:00")
    end = ending(record, progressed, lost, "r1")
    if code is None:
        assert end is None
        return
    assert end.code == code and (code != 256 or EXIT_NEXT_SESSION == 256)
    if note:
        assert note.replace("1:00", "00:01:00") in end.note and "`yolo-orch resume r1` continues it" in end.note
    else:
        assert end.note is None


def test_a_slurm_attempt_script_holds_its_allocation_and_the_runs_command_and_no_secret(tmp_path):
    from orchestrator.launch.slurm_backend import attempt_script
    from orchestrator.rundir import ResolvedRun, RunJob, RunPlan

    resolved = ResolvedRun(run_id="r1", run_dir=str(tmp_path), job_file=None, wandb_mode="offline",
                           job=RunJob({"name": "tiny", "epochs": 3}),
                           plan=RunPlan(job="tiny", devices="0,1", world_size=2, launcher="torchrun", policy="auto",
                                        train_args={}, scaling={}))
    settings = {"time": "30", "partition": "gpu", "sbatch": ["--qos=high"]}
    env = {"PYTHONPATH": "/opt/tool dir", "WANDB_API_KEY": "k-secret", "PGPASSWORD": "p-secret"}
    text = attempt_script(tmp_path, resolved, settings, f"python -m x {tmp_path}", env)
    lines = text.splitlines()
    for wanted in ("#SBATCH --nodes=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=2", "#SBATCH --cpus-per-task=16",
                   "#SBATCH --time=30", "#SBATCH --partition=gpu", "#SBATCH --qos=high", "#SBATCH --no-requeue",
                   f"#SBATCH --output={tmp_path / LOG}", "export PYTHONPATH='/opt/tool dir'"):
        assert wanted in lines, (wanted, text)
    assert lines[-1] == f"exec python -m x {tmp_path}"
    assert "secret" not in text  # secrets reach the job through the environment sbatch exports, never the script


def test_a_slurm_attempt_on_two_nodes_runs_one_torchrun_per_node_from_the_jobs_environment(tmp_path):
    import yaml

    from orchestrator.launch.slurm_backend import SlurmBackend, attempt_script
    from orchestrator.launch.torchrun import SLURM_NODE_RENDEZVOUS
    from orchestrator.rundir import load_resolved

    doc = {"job": {"name": "tiny", "epochs": 1, "target": {"launcher": "slurm"}},
           "plan": {"devices": "2x4", "launcher": "torchrun", "train_args": {"epochs": 1}}}
    (tmp_path / "job.resolved.yaml").write_text(yaml.safe_dump(doc))
    resolved = load_resolved(tmp_path)
    backend = launch.backend_of_run(tmp_path)
    assert isinstance(backend, SlurmBackend) and backend.watched
    line = backend.command(tmp_path)
    assert "--nnodes=2" in line and SLURM_NODE_RENDEZVOUS in line and line.endswith(f"-m orchestrator.worker.ddp {tmp_path}")
    text = attempt_script(tmp_path, resolved, {}, line, {})
    lines = text.splitlines()
    for wanted in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=4",
                   "#SBATCH --cpus-per-task=32"):
        assert wanted in lines, (wanted, text)
    assert 'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"' in lines
    assert lines[-1].startswith("exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 bash -c 'exec ")


def test_a_job_slurm_forgot_ends_as_the_runs_own_files_say(tmp_path):
    """Slurm keeps an ended job for MinJobAge only: a runner that looks later reads the run's summary."""
    from orchestrator.launch.slurm_backend import SlurmAttempt, SlurmBackend

    attempt = SlurmAttempt(SlurmBackend({}, str), tmp_path, "42")
    end = attempt._forgotten("r1", None)  # no summary.json
    assert end.code == 1 and "Slurm no longer knows job 42 and the run did not finish" in end.note
    assert attempt._forgotten("r1", "finished").code == 0


def test_a_slurm_job_whose_training_stopped_at_its_deadline_continues_in_the_next_one():
    from orchestrator.launch.backend import EXIT_NEXT_SESSION
    from orchestrator.launch.slurm_backend import ending, job_record

    record = job_record("JobId=9 JobState=COMPLETED ExitCode=0:0")
    assert ending(record, True, 0, "r1", paused=True).code == EXIT_NEXT_SESSION
    stuck = ending(record, False, 0, "r1", paused=True)
    assert stuck.code == 1 and "stopped at its deadline before an epoch was saved" in stuck.note
    assert ending(record, True, 0, "r1").code == 0  # finished: no deadline stop


def test_the_deadline_margin_is_a_tenth_of_the_limit_at_most_ten_minutes_unless_given():
    from orchestrator.jobspec.slurm import SlurmSettings, deadline_margin

    assert deadline_margin({"time": "1"}) == 6 and deadline_margin({"time": "24:00:00"}) == 600
    assert deadline_margin({}) == 600 and deadline_margin({"time": "1", "margin": 15}) == 15
    with pytest.raises(ValueError, match="margin 60 s is not shorter than the time limit"):
        SlurmSettings(time="1", margin=60)


def test_without_the_ray_extra_a_ray_placement_is_one_line(monkeypatch):
    """The extra missing is the one case this machine cannot be: ray's finder answers as without it."""
    import importlib.util

    from orchestrator.launch import ray_backend

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else found(name, *a))
    assert ray_backend.unavailable({"address": "127.0.0.1:6379"}) == (
        "ray places each attempt from this machine: ray is not installed (pip install 'yolo-orch[ray]', or "
        "scripts/setup.sh ray)")


def test_a_ray_node_runs_the_runs_own_command_with_node_0_as_the_rendezvous(tmp_path):
    import yaml

    from orchestrator.devices import parse_devices
    from orchestrator.launch.ray_backend import RayBackend, bundle_of, node_command

    doc = {"job": {"name": "tiny", "epochs": 1, "target": {"launcher": "ray"}, "ray": {"replacement_wait": 9}},
           "plan": {"devices": "2xcpu:3", "launcher": "torchrun", "train_args": {"epochs": 1}}}
    (tmp_path / "job.resolved.yaml").write_text(yaml.safe_dump(doc))
    backend = launch.backend_of_run(tmp_path)
    assert isinstance(backend, RayBackend) and backend.options.replacement_wait == 9
    cmd = node_command(tmp_path, 1, "10.0.0.5:29511")
    assert "--nnodes=2" in cmd and "--node-rank=1" in cmd and "--master-addr=10.0.0.5" in cmd
    assert "--master-port=29511" in cmd and "--nproc-per-node=3" in cmd
    assert bundle_of(parse_devices("2xcpu:3")) == {"CPU": 3.0}
    assert bundle_of(parse_devices("2x4")) == {"GPU": 4.0, "CPU": 4.0}
