"""The stall watchdog: notices a data-parallel training that stopped moving (a rank stuck in its
dataloader, a collective one rank never reaches, a lost peer) long before any collective timeout
(Ultralytics sets 3 hours), instead of leaving it hanging.

Each rank writes heartbeat/rank<R>.json once a second (worker/heartbeat.py): its epoch, batch and
phase and when they last changed. When no rank's progress changed for `stall_timeout` seconds,
the run is stalled; the rank that stopped advancing is the one furthest behind (a rank blocked
before its forward pass, while the others wait in the gradient all-reduce). The runner then asks
every rank for its Python stacks (STACK_SIGNAL: faulthandler writes stacks/rank<R>.txt), stops
the process group and marks the run stalled, resumable.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from orchestrator.rundir import HEARTBEAT_PHASES, HEARTBEATS, STACK_SIGNAL, STACKS

STACK_WAIT_S = 2.0  # for faulthandler to write every rank's stacks
SUSPENDED_AFTER_S = 5.0  # checks come every poll (0.5 s): a gap this long means the watchdog itself was stopped


@dataclass
class Stall:
    rank: int
    epoch: int
    batch: int
    phase: str
    idle_s: float
    pids: list[int]

    def note(self, run_id: str, run_dir: Path, timeout_s: int) -> str:
        first = (" (in the first epoch: if one training step takes longer than stall_timeout, raise it)"
                 if self.epoch <= 1 else "")
        return (f"stalled: no rank advanced for {self.idle_s:.0f} s (stall_timeout {timeout_s} s); rank {self.rank} "
                f"stopped first, at epoch {self.epoch} batch {self.batch} ({self.phase}){first}; every rank's Python "
                f"stack is in {run_dir / STACKS}; `yolo-orch resume {run_id}` continues it")


def _progress(beat: dict) -> tuple:
    phase = beat.get("phase")
    return (int(beat.get("epoch") or 0), int(beat.get("batch") or 0),
            HEARTBEAT_PHASES.index(phase) if phase in HEARTBEAT_PHASES else 0)


class Watchdog:
    def __init__(self, run_dir: Path, timeout_s: int, clock=time.time, monotonic=time.monotonic):
        self.folder = Path(run_dir) / HEARTBEATS
        self.timeout_s = int(timeout_s)
        self.clock = clock  # the heartbeats' clock (epoch seconds)
        self.monotonic = monotonic  # the gaps between checks
        self.started = clock()
        self.warned = False
        self.last_check = monotonic()
        self.woke = 0.0  # when (clock) the watchdog last came back from a suspension of its own

    def beats(self) -> list[dict]:
        """This attempt's heartbeats (files an earlier attempt left are older than the watchdog)."""
        out = []
        for path in sorted(self.folder.glob("rank*.json")) if self.folder.is_dir() else []:
            try:
                if path.stat().st_mtime >= self.started:
                    out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # being replaced, or cut short: next time
        return out

    def check(self) -> Stall | None:
        now, tick = self.clock(), self.monotonic()
        if tick - self.last_check > SUSPENDED_AFTER_S:  # it was not running itself (SIGSTOP of the whole run,
            self.woke = now  # a suspended VM): the ranks were stopped with it; they get a whole timeout from now
        self.last_check = tick
        beats = self.beats()
        if not beats:
            return None  # training has not started (data caching, model build, the first compile)
        idle = now - max([float(b.get("changed") or 0) for b in beats] + [self.woke])
        if idle < self.timeout_s:
            return None
        behind = min(beats, key=_progress)
        return Stall(int(behind["rank"]), int(behind.get("epoch") or 0), int(behind.get("batch") or 0),
                     str(behind.get("phase")), idle, [int(b["pid"]) for b in beats if b.get("pid") and on_this_host(b)])

    def slow_step_warning(self) -> str | None:
        """Once: a first-epoch step that took over half the timeout could itself pass for a stall."""
        if self.warned:
            return None
        slowest = max((float(b.get("slowest_step_s") or 0) for b in self.beats()), default=0.0)
        if slowest * 2 <= self.timeout_s:
            return None
        self.warned = True
        return (f"stall_timeout {self.timeout_s} s is less than twice the slowest training step of epoch 1 "
                f"({slowest:.0f} s): a slow step may be taken for a stall; raise stall_timeout")


def on_this_host(beat: dict) -> bool:
    """A rank of this machine (a pid of another, a Slurm node's, would signal whatever runs here under it);
    a heartbeat of an earlier version names no host: it was this machine's."""
    return beat.get("host") in (None, socket.gethostname())


def dump_stacks(stall: Stall) -> None:
    """Every rank writes its threads' stacks (faulthandler, from C: works on a hung process)."""
    for pid in stall.pids:
        try:
            os.kill(pid, STACK_SIGNAL)
        except (ProcessLookupError, PermissionError):
            pass
    time.sleep(STACK_WAIT_S)
