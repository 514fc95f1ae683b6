"""`yolo-orch kaggle launch` (and scripts/kaggle_tpu_launch.py, which wraps it) against a fake
`kaggle` CLI: build, push, poll, pull into the run directory, registry row, and one resume cycle
(a session that stopped before the job's epochs were done -> a second push with kernel_sources =
the first kernel)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

import fake_kaggle as fk
from conftest import REPO, cli_env, kaggle_job

from orchestrator.kaggle.build import read_bundle
from orchestrator.rundir import SESSION_RESUME
from orchestrator.worker.deadline import SessionDeadline

SCRIPT = REPO / "scripts" / "kaggle_tpu_launch.py"
RUN_ID = "20260101-000000-beef"


def run_tarball(run_id: str, epochs_done: int, epochs: int, finished: bool) -> bytes:
    header = "epoch,train/box_loss,metrics/mAP50(B)\n"
    rows = "".join(f"{e + 1},1.0,{0.1 * (e + 1):.1f}\n" for e in range(epochs_done))
    files = {
        "results.csv": header + rows,
        "weights/last.pt": "last",
        "summary.json": json.dumps({"state": "finished" if finished else "paused", "epochs_completed": epochs_done,
                                    "best": f"/tmp/kaggle/runs/tiny/{run_id}/weights/best.pt",
                                    "last": f"/tmp/kaggle/runs/tiny/{run_id}/weights/last.pt"}),
        "job.resolved.yaml": f"run_id: {run_id}\nrun_dir: /tmp/kaggle/runs/tiny/{run_id}\n"
                             "job: {name: tiny, epochs: 2}\n"
                             "plan: {devices: 'tpu:8', launcher: xla, train_args: {epochs: 2}}\n",
        "events.jsonl": "".join(json.dumps({"event": "epoch", "epoch": e + 1}) + "\n" for e in range(epochs_done)),
    }
    files["weights/best.pt"] = "best"
    if not finished:
        files[str(SESSION_RESUME)] = "resumable"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{run_id}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def session_output(run_id: str, session: int, epochs_done: int, epochs: int) -> dict:
    done = epochs_done >= epochs
    tar = f"tiny-{run_id}.tar.gz"
    resume = {"format": 1, "job": "tiny", "run_id": run_id, "epochs": epochs, "epochs_done": epochs_done,
              "done": done, "state": "finished" if done else "paused", "tarball": tar, "session": session,
              "metrics": {"metrics/mAP50(B)": 0.1 * epochs_done} if done else {}}
    return {"resume.json": json.dumps(resume), tar: run_tarball(run_id, epochs_done, epochs, done)}


ENTRIES = {"cli": [sys.executable, "-m", "orchestrator", "kaggle", "launch"], "script": [sys.executable, str(SCRIPT)]}


def launch(tmp_path: Path, env: dict, *args, entry: str = "cli") -> subprocess.CompletedProcess:
    """`yolo-orch kaggle launch JOB ...`, or the script that wraps it."""
    job = kaggle_job(tmp_path, epochs=2)
    return subprocess.run([*ENTRIES[entry], str(job), "--runs-dir", str(tmp_path / "runs"),
                           "--run-id", RUN_ID, "--poll", "0", *args],
                          env=fk.clean_env(cli_env(env)), capture_output=True, text=True, timeout=300, cwd=tmp_path)


def registry_row(tmp_path: Path):
    from orchestrator.registry import Registry

    reg = Registry.open(tmp_path / "runs")
    try:
        return reg.get(RUN_ID)
    finally:
        reg.close()


@pytest.mark.parametrize("entry", ["cli", "script"])
def test_launch_resumes_in_a_second_session_until_done(tmp_path, entry):
    env = fk.install(tmp_path)
    fk.stage_output(env, "yolo-orch-tiny", session_output(RUN_ID, 1, 1, 2))  # stopped before the limit
    fk.stage_output(env, "yolo-orch-tiny-s2", session_output(RUN_ID, 2, 2, 2))
    res = launch(tmp_path, env, entry=entry)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"run tiny/{RUN_ID}: finished" in res.stdout
    assert "2/2 epochs in 2 session(s)" in res.stdout

    calls = fk.calls(env)
    assert [c[:2] for c in calls] == [["kernels", "push"], ["kernels", "status"], ["kernels", "status"],
                                      ["kernels", "output"]] * 2
    first, second = fk.pushed(env)
    meta1 = json.loads((first / "kernel-metadata.json").read_text())
    meta2 = json.loads((second / "kernel-metadata.json").read_text())
    assert meta1["id"] == "alice/yolo-orch-tiny" and meta1["kernel_sources"] == []
    assert meta2["id"] == "alice/yolo-orch-tiny-s2" and meta2["kernel_sources"] == ["alice/yolo-orch-tiny"]
    b1, b2 = read_bundle(first), read_bundle(second)
    assert b1["run_id"] == b2["run_id"] == RUN_ID
    assert b2["session"] == 2 and b2["resume_from"] == "alice/yolo-orch-tiny"
    assert meta2["enable_internet"] is False and "docker_image" not in meta2

    run_dir = tmp_path / "runs" / "tiny" / RUN_ID
    assert (run_dir / "results.csv").read_text().count("\n") == 3  # header + 2 epochs, from session 2
    assert (run_dir / "weights" / "best.pt").read_text() == "best"
    assert (run_dir / "kaggle" / "session-1" / "kernel-metadata.json").is_file()
    assert (run_dir / "kaggle" / "session-2" / "output" / "resume.json").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best"] == str(run_dir / "weights" / "best.pt")  # localized
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert resolved["run_dir"] == str(run_dir)
    assert resolved["kaggle"]["kernel_run_dir"] == f"/tmp/kaggle/runs/tiny/{RUN_ID}"
    row = registry_row(tmp_path)
    assert row.state == "finished" and row.epochs_done == 2 and row.epochs == 2
    assert row.devices == "tpu:8" and row.tags["launcher"] == "kaggle"
    assert row.attempts == 2  # each session an attempt of the runner (kaggle/backend.py)
    assert any("session 2" in n.text for n in row.notes)


def test_a_failed_session_stops_the_loop_with_the_reason(tmp_path):
    env = fk.install(tmp_path)
    fk.stage_status(env, "yolo-orch-tiny", "KernelWorkerStatus.ERROR")
    fk.stage_output(env, "yolo-orch-tiny", {"resume.json": json.dumps(
        {"run_id": RUN_ID, "epochs": 2, "epochs_done": 0, "done": False, "state": "failed",
         "reason": "RuntimeError: boom", "tarball": None})})
    res = launch(tmp_path, env)
    assert res.returncode == 1
    assert "session 1 (alice/yolo-orch-tiny) error: RuntimeError: boom" in res.stdout
    assert "Your notebook hit an error" in res.stdout
    assert len(fk.pushed(env)) == 1
    assert registry_row(tmp_path).state == "failed"


def test_a_session_without_progress_is_not_pushed_forever(tmp_path):
    env = fk.install(tmp_path)
    fk.stage_output(env, "yolo-orch-tiny", session_output(RUN_ID, 1, 1, 2))
    fk.stage_output(env, "yolo-orch-tiny-s2", session_output(RUN_ID, 2, 1, 2))  # still 1/2
    res = launch(tmp_path, env)
    assert res.returncode == 1 and "made no progress" in res.stdout
    assert len(fk.pushed(env)) == 2


def test_ctrl_c_in_a_session_is_a_killed_run_that_the_printed_command_continues(tmp_path):
    """The runner's stop on Ctrl-C, on the Kaggle backend: nothing runs here to stop, the kernel may still run
    on Kaggle, so the run is killed with the command that continues it; that command claims the row back."""
    import signal
    import time

    env = fk.install(tmp_path)
    fk.stage_status(env, "yolo-orch-tiny", "KernelWorkerStatus.RUNNING")  # it trains until the Ctrl-C
    job = kaggle_job(tmp_path, epochs=2)
    proc = subprocess.Popen([*ENTRIES["cli"], str(job), "--runs-dir", str(tmp_path / "runs"), "--run-id", RUN_ID,
                             "--poll", "0"], env=fk.clean_env(cli_env(env)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.time() + 120
    while sum(c[:2] == ["kernels", "status"] for c in fk.calls(env)) < 3 and time.time() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert f"run tiny/{RUN_ID}: killed" in out
    assert f"the Kaggle kernel may still be running. Continue with: scripts/kaggle_tpu_launch.py JOB --run-id {RUN_ID}" in out
    row = registry_row(tmp_path)
    assert row.state == "killed" and row.attempts == 1 and "may still be running" in row.notes[-1].text

    fk.stage_status(env, "yolo-orch-tiny", "KernelWorkerStatus.COMPLETE")
    fk.stage_output(env, "yolo-orch-tiny", session_output(RUN_ID, 1, 2, 2))
    res = launch(tmp_path, env)  # the printed command: the same --run-id
    assert res.returncode == 0, res.stdout + res.stderr
    row = registry_row(tmp_path)
    assert row.state == "finished" and row.attempts == 2 and row.epochs_done == 2
    assert len(fk.pushed(env)) == 2


def test_max_sessions_stops_the_runner_before_another_push(tmp_path):
    env = fk.install(tmp_path)
    fk.stage_output(env, "yolo-orch-tiny", session_output(RUN_ID, 1, 1, 2))  # paused at 1/2
    res = launch(tmp_path, env, "--max-sessions", "1")
    assert res.returncode == 1 and "stopped after 1 sessions (--max-sessions) with 1/2 epochs" in res.stdout
    assert len(fk.pushed(env)) == 1
    row = registry_row(tmp_path)
    assert row.state == "failed" and row.attempts == 2 and row.epochs_done == 1  # the refused start: an attempt


def test_the_kaggle_backend_is_a_backend_of_the_runner(tmp_path):
    from orchestrator.jobspec.loader import load_job
    from orchestrator.kaggle.backend import Ended, KaggleBackend, LaunchOptions
    from orchestrator.launch.backend import Attempt, Backend

    backend = KaggleBackend(load_job(kaggle_job(tmp_path, epochs=2)), LaunchOptions())
    assert isinstance(backend, Backend) and backend.name == "kaggle"
    assert not backend.watched  # the kernel's heartbeats come back hours old with its outputs
    ended = Ended("why")
    assert isinstance(ended, Attempt) and ended.wait(0) == ended.stop() == 1 and ended.note == "why"


def test_launch_needs_the_cli_and_credentials(tmp_path):
    env = fk.install(tmp_path, credentials=False)
    env["HOME"] = str(tmp_path)
    res = launch(tmp_path, env)
    assert res.returncode == 2 and "not authenticated" in res.stderr
    assert fk.calls(env) == []


def test_deadline_callback_stops_at_the_epoch_boundary(tmp_path):
    class Trainer:
        epochs, stop, epoch_time = 10, False, None

    (tmp_path / "weights").mkdir()
    last = tmp_path / "weights" / "last.pt"
    last.write_text("epoch 3 checkpoint")
    now = [1000.0]
    cb = SessionDeadline(deadline=1000.0 + 450, run_dir=tmp_path, safety=1.0, clock=lambda: now[0])
    t = Trainer()
    t.last = last
    for epoch, duration in enumerate([200.0, 100.0]):  # first epoch includes compilation
        t.epoch, t.epoch_time = epoch, duration
        now[0] += duration
        cb(t)
        assert not t.stop
    t.epoch, t.epoch_time = 2, 100.0
    now[0] += 100.0  # 400 s in: the next 100 s epoch would end at 500 > 450
    cb(t)
    assert t.stop
    assert (tmp_path / SESSION_RESUME).read_text() == "epoch 3 checkpoint"
    record = json.loads((tmp_path / "session_stop.json").read_text())
    assert record["epoch"] == 3 and record["epochs"] == 10
    last.write_text("stripped by final_eval")
    t.epoch = 3
    cb(t)  # final_eval's extra on_fit_epoch_end: ignored
    assert (tmp_path / SESSION_RESUME).read_text() == "epoch 3 checkpoint"


def test_deadline_callback_leaves_the_last_epoch_alone(tmp_path):
    class Trainer:
        epochs, stop, epoch, epoch_time = 3, True, 2, 500.0

    cb = SessionDeadline(deadline=0.0, run_dir=tmp_path, clock=lambda: 10.0)
    cb(Trainer())
    assert not (tmp_path / "session_stop.json").exists()


def test_a_deadline_in_the_resolved_job_attaches_the_callback_and_clears_an_old_stop(tmp_path):
    """The XLA entry (local and in a Kaggle session) attaches the deadline like any hook, to its
    callback table; a stop record left by the previous session does not pause this one."""
    import time

    from orchestrator.rundir import ResolvedRun
    from orchestrator.worker import deadline
    from orchestrator.worker.xla_entry import Hooks

    def run(deadline_s):
        return ResolvedRun.from_dict({"plan": {"devices": "tpu:8"}, "deadline": deadline_s})

    (tmp_path / "session_stop.json").write_text("{}")
    hooks = Hooks()
    deadline.attach(hooks, tmp_path, run(time.time() + 60))
    assert not (tmp_path / "session_stop.json").exists()
    assert [type(fn) for fn in hooks.table["on_fit_epoch_end"]] == [SessionDeadline]
    none = Hooks()
    deadline.attach(none, tmp_path, run(None))
    assert none.table == {}
