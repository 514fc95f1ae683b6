"""The names the two processes agree on: the files of a run directory, the training process's exit codes,
the environment variables the orchestrator hands it, and a run's id."""

from __future__ import annotations

import secrets
import signal
from datetime import datetime, timezone
from pathlib import Path

# ---------------------------------------------------------------- files in a run directory
ENV = "env.json"
LOG = "train.log"
EVENTS = "events.jsonl"
SUMMARY = "summary.json"
RESULTS = "results.csv"  # Ultralytics' per-epoch metrics: one row per finished epoch
WEIGHTS = Path("weights")
LAST = WEIGHTS / "last.pt"
BEST = WEIGHTS / "best.pt"
RESUME_PATCHED = WEIGHTS / "resume.pt"  # last.pt with the current plan's train args (a re-planned resume)
SESSION_RESUME = WEIGHTS / "session_resume.pt"  # the resumable checkpoint kept when a deadline stopped the run
DEADLINE_STOP = "session_stop.json"  # why and when a deadline stopped the run (its presence: state `paused`)
XLA_COMPILE_CACHE = "xla_cache"  # torch_xla's compiled graphs, carried to the next Kaggle session
HEARTBEATS = "heartbeat"  # rank<R>.json: each rank's progress, read by the stall watchdog
HEARTBEAT_PHASES = ("start", "batch", "forward", "done", "val")  # their order within an epoch
STACKS = "stacks"  # rank<R>.txt: every thread's Python stack, written when the watchdog sends STACK_SIGNAL
STACK_SIGNAL = signal.SIGUSR2

# ---------------------------------------------------------------- exit codes of the training process
EXIT_OOM = 75  # out of memory (EX_TEMPFAIL): the orchestrator re-plans with half the batch and restarts
EXIT_NOT_RESUMABLE = 3  # the checkpoint it was told to resume from cannot be resumed

ENV_CALLBACKS = "YOLO_ORCH_CALLBACKS"  # hooks for every run, comma-separated (tests' fault hooks): ResolvedRun.callbacks
# epoch seconds before which the training stops at an epoch boundary, resumable (worker/deadline.py): a Slurm
# job's script sets it from the job's end time, known only once the job starts (launch/slurm_backend.py)
ENV_DEADLINE = "YOLO_ORCH_DEADLINE"

# ---------------------------------------------------------------- the supervisor's identity, in the child's env
ENV_SUPERVISOR_PID = "YOLO_ORCH_SUPERVISOR_PID"
ENV_SUPERVISOR_START = "YOLO_ORCH_SUPERVISOR_START"


def new_run_id() -> str:
    """A run's id and folder name: its UTC start time, sortable, plus 4 hex digits against collisions."""
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
