"""The stall watchdog's reading of heartbeat files (orchestrator/watchdog.py); the real thing, a
hung gloo rank, is in tests/e2e/test_watchdog.py."""

from __future__ import annotations

import json
import os

from orchestrator.watchdog import Watchdog


def beat(folder, rank, epoch, batch, phase, changed, mtime=None, slowest=0.0, **more):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps({"rank": rank, "pid": 1000 + rank, "epoch": epoch, "batch": batch, "phase": phase,
                                "changed": changed, "slowest_step_s": slowest, **more}))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_no_change_on_any_rank_for_the_timeout_is_a_stall_naming_the_rank_behind(tmp_path):
    now = [1000.0]
    dog = Watchdog(tmp_path, 60, clock=lambda: now[0])
    assert dog.check() is None  # no heartbeat yet: training has not started
    beat(tmp_path / "heartbeat", 0, 2, 1, "forward", changed=1010.0, mtime=1070.0)  # waiting in the all-reduce
    beat(tmp_path / "heartbeat", 1, 2, 1, "batch", changed=1009.0, mtime=1070.0)  # hung before its forward
    now[0] = 1069.0
    assert dog.check() is None  # rank 0 changed 59 s ago
    now[0] = 1071.0
    stall = dog.check()
    assert (stall.rank, stall.epoch, stall.batch, stall.phase, stall.pids) == (1, 2, 1, "batch", [1000, 1001])
    assert "rank 1 stopped first, at epoch 2 batch 1 (batch)" in stall.note("r1", tmp_path, 60)


def test_only_this_machines_ranks_are_asked_for_their_stacks(tmp_path):
    """A rank on another node (a run placed on Slurm) is named, but its pid is not signalled here."""
    import socket

    dog = Watchdog(tmp_path, 60, clock=lambda: 1100.0)
    beat(tmp_path / "heartbeat", 0, 2, 1, "forward", changed=1010.0, mtime=1100.0, host=socket.gethostname())
    beat(tmp_path / "heartbeat", 1, 2, 1, "batch", changed=1009.0, mtime=1100.0, host="node-elsewhere")
    stall = dog.check()
    assert stall.rank == 1 and stall.pids == [1000]


def test_one_rank_advancing_is_no_stall_and_an_earlier_attempts_files_are_ignored(tmp_path):
    now = [2000.0]
    dog = Watchdog(tmp_path, 60, clock=lambda: now[0])
    beat(tmp_path / "heartbeat", 0, 1, 3, "val", changed=2100.0, mtime=2101.0)  # rank 0 validates
    beat(tmp_path / "heartbeat", 1, 1, 3, "done", changed=2001.0, mtime=2101.0)  # rank 1 waits for it
    now[0] = 2150.0
    assert dog.check() is None
    beat(tmp_path / "heartbeat", 2, 1, 1, "batch", changed=1.0, mtime=1500.0)  # left by the killed attempt
    assert [b["rank"] for b in dog.beats()] == [0, 1]


def test_a_first_epoch_step_over_half_the_timeout_is_warned_once(tmp_path):
    dog = Watchdog(tmp_path, 60, clock=lambda: 0.0)
    beat(tmp_path / "heartbeat", 0, 1, 2, "done", changed=5.0, slowest=20.0)
    assert dog.slow_step_warning() is None
    beat(tmp_path / "heartbeat", 0, 1, 3, "done", changed=6.0, slowest=31.0)
    warning = dog.slow_step_warning()
    assert "stall_timeout 60 s is less than twice the slowest training step of epoch 1 (31 s)" in warning
    assert dog.slow_step_warning() is None


def test_a_watchdog_stopped_with_its_ranks_gives_them_a_whole_timeout_after_it_wakes(tmp_path):
    """SIGSTOP of the whole run (orchestrator and ranks) for longer than the timeout, then SIGCONT: the
    heartbeats are old only because everything was stopped; the watchdog, which was stopped too, sees
    the gap between its own checks and waits a whole timeout for progress before it calls a stall."""
    now, tick = [3000.0], [0.0]
    dog = Watchdog(tmp_path, 60, clock=lambda: now[0], monotonic=lambda: tick[0])
    beat(tmp_path / "heartbeat", 0, 1, 2, "batch", changed=3000.0, mtime=3001.0)
    now[0], tick[0] = 3001.0, 1.0
    assert dog.check() is None
    now[0], tick[0] = 3200.0, 200.0  # stopped for 199 s, checks included
    assert dog.check() is None  # woke: no stall yet
    for second in range(201, 260):  # checks every second again
        now[0], tick[0] = 3000.0 + second, float(second)
        assert dog.check() is None, second
    now[0], tick[0] = 3261.0, 261.0  # a whole timeout after waking, still no progress: a stall
    assert dog.check().rank == 0
