"""Where an attempt of a run trains, behind one interface (SkyPilot's `Backend`: provision, run, stop).

The runner (runner.supervise) owns a run's life: it asks the run's backend to start an attempt, waits on
it while it tails the events, stops it on Ctrl-C, SIGTERM or a stall, and records the outcome through the
registry. A backend knows only how its training starts and ends:

    attempt = backend("torchrun").start(run_dir, env)   # training now
    code = attempt.wait(0.5)                             # None while it trains, then its exit code
    attempt.stop(grace_s=5)                              # all of it: every rank, every dataloader worker

local, torchrun and XLA are one process group on this machine that differ only in their command
(launch/local.py, torchrun.py, xla.py). Kaggle is a backend whose attempt is one session of a kernel
(kaggle/backend.py): it ends with EXIT_NEXT_SESSION when the session's limit came before the job's epochs,
and the runner starts the next. Slurm wraps a whole `submit` in an sbatch script (launch/slurm.py), whose
runner is the one inside the allocation."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from orchestrator.launch import process
from orchestrator.rundir import LOG


# An attempt that ended at its session's limit with epochs left (a Kaggle session): not a failure; the runner
# starts the next attempt on the same backend. Outside what a process can end with (0 to 255, or -N for a
# signal), so no training process is ever taken for a paused session; the command exits with the run's code.
EXIT_NEXT_SESSION = 256


@runtime_checkable
class Attempt(Protocol):
    """One start of a run's training."""

    pid: int  # the process the registry records as the run's worker
    note: str | None  # why it ended, when it knows better than train.log (a Kaggle session's reason)

    def wait(self, timeout_s: float) -> int | None:
        """Its exit code once it has ended; None when it still trains after `timeout_s`."""

    def stop(self, grace_s: float = 15.0) -> int:
        """End all of it (SIGTERM, then SIGKILL after `grace_s`) and return its exit code."""


@runtime_checkable
class Backend(Protocol):
    name: str
    watched: bool  # its ranks' heartbeats are written on this machine as they train: the stall watchdog reads them

    def start(self, run_dir: Path, env: dict[str, str]) -> Attempt:
        """Start an attempt of the run in `run_dir` (its job.resolved.yaml), `env` over this process's."""


@dataclass(frozen=True)
class ProcessAttempt:
    """A training process group on this machine, its output appended to the run's train.log."""

    proc: subprocess.Popen
    note: str | None = None  # the runner reads why it failed from train.log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout_s: float) -> int | None:
        try:  # wakes the moment the process exits, not up to timeout_s later
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace_s: float = 15.0) -> int:
        return process.stop_group(self.proc, grace_s)


@dataclass(frozen=True)
class ProcessBackend:
    """One process group on this machine, started from `command(run_dir)`."""

    name: str
    command: Callable[[Path], list[str]]
    watched: bool = True

    def start(self, run_dir: Path, env: dict[str, str]) -> ProcessAttempt:
        return ProcessAttempt(process.start(self.command(run_dir), run_dir / LOG, env=env))
