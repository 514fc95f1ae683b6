"""The run-directory contract: everything the orchestrator and the training process agree on.

The two sides meet only here and in the files this package names. The orchestrator writes
job.resolved.yaml (the typed `ResolvedRun` of rundir/resolved.py: job, plan, resume/OOM history) and starts the training process with the run
directory as its one argument; the training process (rank 0) appends one JSON object per line to
events.jsonl, which the orchestrator tails for progress bars, the registry and summaries, writes
summary.json when it finishes and ends with one of the exit codes below. This package imports
nothing else of the tool, so the training process pulls in no Pydantic, scaler or registry."""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import signal
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from orchestrator.rundir.files import (dump_yaml, load_own_yaml, replaced_atomically, write_bytes_atomic,
                                       write_json_atomic, write_text_atomic)
from orchestrator.rundir.resolved import (RESOLVED, SCHEMA_VERSION, NodeOptions, OomStep, ResolvedRun,
                                          ResolvedRunError, ResumeOrder, ResumeRecord, RunDirVersionError, RunJob,
                                          RunPlan, TrialLink, load_resolved, parse_resolved, resolved_or_none)

# ---------------------------------------------------------------- names in a run directory
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

# ---------------------------------------------------------------- the supervisor's identity, in the child's env
ENV_SUPERVISOR_PID = "YOLO_ORCH_SUPERVISOR_PID"
ENV_SUPERVISOR_START = "YOLO_ORCH_SUPERVISOR_START"


def new_run_id() -> str:
    """A run's id and folder name: its UTC start time, sortable, plus 4 hex digits against collisions."""
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def rank() -> int:
    """This training process's rank: -1 alone, 0 the primary of several (it writes the events)."""
    return int(os.environ.get("RANK", -1))


def is_primary() -> bool:
    return rank() in (-1, 0)


def float_or_none(value: Any) -> float | None:
    """A metric as a plain float (tensors, numpy scalars), None when it is none or not a number."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None




def completed_epochs(run_dir: Path) -> int:
    """Epochs trained and checkpointed, without torch: the last epoch of results.csv (Ultralytics writes
    an epoch's row just before that epoch's last.pt; a resume from an earlier checkpoint repeats rows),
    not counting a last row newer than last.pt: that epoch's checkpoint never landed (a kill or a full
    disk between the two), so a resume trains it again. No last.pt: nothing is checkpointed."""
    run_dir = Path(run_dir)
    csv, last = run_dir / RESULTS, run_dir / LAST
    if not csv.is_file() or not last.is_file():
        return 0
    rows = [line for line in csv.read_text(errors="replace").splitlines()[1:] if line.strip()]
    if rows and last.stat().st_mtime_ns < csv.stat().st_mtime_ns:
        rows = rows[:-1]
    return max(filter(None, map(row_epoch, rows)), default=0)


def row_epoch(row: str) -> int | None:
    """The epoch of one results.csv row (its first field), None for a row cut short or a header."""
    try:
        return int(float(row.split(",", 1)[0]))
    except ValueError:
        return None


class EventWriter:
    def __init__(self, path: Path):
        self.path = path

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "time": time.time(), **fields}
        line = json.dumps(record, default=_plain) + "\n"
        # One write() per line on an O_APPEND fd: readers never see half a record.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def end_torn_line(path: Path) -> bool:
    """A writer killed in the middle of a line (a crash, a full disk) leaves events.jsonl without its
    last newline; the next record appended would be glued to the torn one and lost with it. Ends the
    torn line (readers skip it) before anything is appended again; True when there was one."""
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) == b"\n":
                return False
    except OSError:  # missing or empty
        return False
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    try:
        os.write(fd, b"\n")
    finally:
        os.close(fd)
    return True


def _plain(value: Any):
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class EventTail:
    """Incrementally read complete lines from events.jsonl."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0

    def read_new(self) -> Iterator[dict]:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            record = parse_event(line)
            if record is not None:
                yield record


def parse_event(line: bytes | str) -> dict | None:
    """One events.jsonl line as an event, or None when it is none: torn or corrupted bytes, JSON that is
    not an object (`[1, 2]`), nesting too deep to parse, or a `metrics` that is not a mapping. Every
    reader of events (the runner, resume, `show`, the dashboard) reads lines through this one."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # (bytes that are no UTF-8 are a ValueError too)
        return None
    if not isinstance(record, dict) or not isinstance(record.get("metrics", {}), dict):
        return None
    return record


def trained_epoch_events(events_path: Path) -> list[dict]:
    """The `epoch` events of events.jsonl that record a training, in order, less those a later `rewind`
    event (a resume from an earlier checkpoint, rundir/checkpoints.py) declared trained again."""
    events: list[dict] = []
    for event in EventTail(Path(events_path)).read_new():
        if event.get("event") == "epoch" and isinstance(event.get("epoch"), int):
            events.append(event)
        elif event.get("event") == "rewind" and isinstance(event.get("to_epoch"), int):
            events = [e for e in events if e["epoch"] < event["to_epoch"]]
    return events


def trained_epochs(events_path: Path) -> list[int]:
    """The epochs events.jsonl records as trained, in order (trained_epoch_events')."""
    return [event["epoch"] for event in trained_epoch_events(events_path)]


def missing_epochs(events_path: Path, upto: int) -> list[tuple[int, dict[str, float]]]:
    """Epochs 1..upto (those a resume starts after) that results.csv recorded and events.jsonl does not,
    with their metrics: a kill between Ultralytics' save of last.pt and its on_fit_epoch_end trains an
    epoch whose event never came. Its results.csv row, written before last.pt, has its metrics."""
    results = Path(events_path).parent / RESULTS
    if upto <= 0 or not results.is_file():
        return []
    seen = set(trained_epochs(events_path))
    out = []
    with results.open(newline="") as f:
        for row in csv.DictReader(f):
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            try:
                epoch = int(float(row.get("epoch", "")))
            except ValueError:
                continue
            if epoch <= upto and epoch not in seen:
                seen.add(epoch)  # an epoch retrained by an earlier resume has two rows: one event
                values = {k: float_or_none(v) for k, v in row.items() if k not in ("epoch", "time")}
                out.append((epoch, {k: round(v, 6) for k, v in values.items() if v is not None}))
    return out


def finish_run(run_dir: Path, events: EventWriter, *, epochs: int, epochs_completed: int,
               metrics: dict, started: float, **extra: Any) -> dict:
    """The worker's last word on a training that ended without an error: summary.json (atomic) and
    the `done` event; state `paused` when a deadline stopped it (DEADLINE_STOP), else `finished`."""
    state = "paused" if (run_dir / DEADLINE_STOP).is_file() else "finished"
    summary = run_summary(run_dir, state=state, epochs=epochs, epochs_completed=epochs_completed,
                          metrics=metrics, started=started, **extra)
    write_json_atomic(run_dir / SUMMARY, summary)
    events.emit("done", **summary)
    return summary


def run_summary(run_dir: Path, *, state: str, epochs: int, epochs_completed: int, metrics: dict,
                started: float, **extra: Any) -> dict:
    """summary.json's fields: how far the run got, its metrics and where its weights are."""
    return {
        "state": state,
        "epochs": epochs,
        "epochs_completed": epochs_completed,
        "metrics": metrics,
        "best": str(run_dir / BEST) if (run_dir / BEST).exists() else None,
        "last": str(run_dir / LAST) if (run_dir / LAST).exists() else None,
        "wall_time_s": round(time.time() - started, 2),
        **extra,
    }


# ---------------------------------------------------------------- processes: who is alive, dying with a parent

def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_identity(pid: int | None) -> str | None:
    """A string that names one process for its lifetime: boot id + start time (Linux /proc);
    None when the process does not exist. Elsewhere: psutil's create_time when installed,
    else the bare PID (liveness only)."""
    if not pid or pid <= 0:
        return None
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            text = stat.read_text()
        except OSError:
            return None
        # comm may contain spaces and parentheses: fields start after the last ')'
        fields = text[text.rfind(")") + 2:].split()
        if fields and fields[0] in ("Z", "X"):  # zombie / dead: no longer running
            return None
        return f"{_boot_id()}:{fields[19]}"  # field 22 of stat: starttime in clock ticks since boot
    try:
        import psutil  # type: ignore

        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"psutil:{p.create_time():.3f}"
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return f"pid:{pid}"
    except Exception:  # psutil.NoSuchProcess and friends
        return None


def process_alive(pid: int | None, identity: str | None) -> bool:
    """True when `pid` still runs AND is the same process that was recorded (not a reused PID)."""
    current = process_identity(pid)
    if current is None:
        return False
    return identity is None or current == identity


def die_with_parent(sig: int) -> None:
    """Linux: the kernel sends this process `sig` when its parent ends (PR_SET_PDEATHSIG), even when
    the parent is killed by SIGKILL. A no-op elsewhere; callers add a polling watch for every platform."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os.kill(os.getpid(), sig)


_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b.*")


def failure_cause(run_dir: Path, exit_code: int | None = None, tail_bytes: int = 64 * 1024) -> str:
    """One line saying why a worker ended badly, from its exit status and the end of train.log:
    the signal that killed it, else the last exception line Python printed, else the last line."""
    if exit_code is not None and exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        hint = " (the kernel's OOM killer sends SIGKILL: see `dmesg`)" if name == "SIGKILL" else ""
        return f"the training process was killed by {name}{hint}"
    log = Path(run_dir) / LOG
    try:
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - tail_bytes))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return f"exit code {exit_code}" if exit_code is not None else "no log"
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return line[:400]
    return (lines[-1][:400] if lines else f"exit code {exit_code}, nothing in {LOG}")
