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
