"""Child process groups: start training in its own session so a crash never takes
the orchestrator down, and stop the WHOLE group (every rank, every dataloader
worker) on Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from orchestrator.rundir import die_with_parent


def start(cmd: list[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    # O_NOFOLLOW: never append through a symbolic link planted in the run dir (runner.refuse_symlinks)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    log = open(fd, "ab", buffering=0)  # noqa: SIM115 - owned by the child for its lifetime
    try:
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=cwd,
            start_new_session=True,  # its own process group: we signal the group
        )
    finally:
        log.close()


def stop_group(proc: subprocess.Popen, grace_s: float = 15.0) -> int:
    """SIGTERM the child's process group, then SIGKILL whatever is left after `grace_s`.
    Descendants that left the group (torchrun starts every rank in its own session) are
    found before signalling and SIGKILLed too if they outlive the grace period."""
    strays = descendants(proc.pid) if proc.poll() is None else []
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.time() + grace_s
        while proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)  # stragglers (dataloader workers) even if the leader exited
    code = proc.wait()
    for p in strays:
        try:
            p.kill()  # psutil checks the process identity (PID reuse) before signalling
        except Exception:  # noqa: BLE001 - gone already, or not ours
            pass
    return code


def descendants(pid: int) -> list:
    """psutil.Process objects of every descendant of `pid` (empty without psutil)."""
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:  # noqa: BLE001 - psutil missing, or the process is gone
        return []


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


INTERRUPTS = (signal.SIGTERM, signal.SIGINT)


def ignore_interrupts() -> None:
    """From the first interrupt on, the process is stopping: a second one (a Ctrl-C and then the parent's
    SIGTERM, or the kernel's parent-death signal and the parent watch) must not cut that stop short and
    leave a child running or a tracker's run open. Every stop it then makes is bounded (stop_group's grace)."""
    for sig in INTERRUPTS:
        signal.signal(sig, signal.SIG_IGN)


@contextmanager
def interrupts_raise():
    """Turn the first SIGTERM or SIGINT into `Interrupted` so the caller can stop its children; later ones
    are ignored from then on (see ignore_interrupts)."""
    interrupted = False

    def handler(signum, frame):
        nonlocal interrupted
        interrupted = True
        ignore_interrupts()
        raise Interrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in INTERRUPTS}
    try:
        yield
    finally:
        if not interrupted:
            for sig, h in old.items():
                signal.signal(sig, h)


def stop_when_parent_dies(parent_pid: int, interval_s: float = 1.0) -> None:
    """Send this process SIGTERM when `parent_pid` is gone (kill -9 of the command that started it):
    the kernel's PR_SET_PDEATHSIG on Linux, else a polling thread (a dead parent's children are
    re-parented, so the parent PID changes); a parent that died before this ran, at once. One signal:
    SIGTERM takes the same path as a Ctrl-C of the parent, so a sweep worker fails its running trial
    cleanly and stops that trial's training process group."""
    import threading

    if os.getppid() != parent_pid:  # (between this and prctl, die_with_parent's own check sees it)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    if die_with_parent(signal.SIGTERM):
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval_s)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="yolo-orch-parent-watch", daemon=True).start()
