"""The run directory's files and the event stream between worker and orchestrator.

The worker (rank 0) appends one JSON object per line to events.jsonl; the
orchestrator tails it to drive progress bars, the registry and summaries."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from orchestrator.spec.yamlio import load_own_yaml

RESOLVED = "job.resolved.yaml"
ENV = "env.json"
LOG = "train.log"
EVENTS = "events.jsonl"
SUMMARY = "summary.json"


def load_resolved(run_dir: Path) -> dict:
    """The run's job.resolved.yaml (job, plan, resume/OOM history), as written by the tool."""
    return load_own_yaml((Path(run_dir) / RESOLVED).read_text())


def completed_epochs(run_dir: Path) -> int:
    """Epochs Ultralytics recorded (results.csv rows, one per finished epoch), without torch."""
    csv = Path(run_dir) / "results.csv"
    if not csv.is_file():
        return 0
    return max(sum(1 for line in csv.read_text().splitlines() if line.strip()) - 1, 0)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never a part (see `replaced_atomically`)."""
    with replaced_atomically(path) as tmp:
        tmp.write_text(text)


def write_bytes_atomic(path: Path, data: bytes, fsync: bool = False) -> int:
    """`write_text_atomic` for bytes; `fsync` before the rename for checkpoints (a crash right after
    must not leave a renamed but empty file)."""
    with replaced_atomically(path) as tmp:
        with open(tmp, "wb") as f:
            written = f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    return written


@contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; when the block ends, the file written there replaces
    `path` in one rename (nothing is replaced if the block wrote none); on an error it is removed. The
    temporary file's name is unique per writer: two sweep commands on one study may write its
    summary.json at once, and with one shared name one writer's rename would publish another's
    half-written file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        if tmp.exists():
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def finish_run(run_dir: Path, events: EventWriter, *, epochs: int, epochs_completed: int,
               metrics: dict, started: float, **extra: Any) -> dict:
    """The worker's last word on a finished training: summary.json (atomic) and the `done` event."""
    weights = run_dir / "weights"
    summary = {
        "state": "finished",
        "epochs": epochs,
        "epochs_completed": epochs_completed,
        "metrics": metrics,
        "best": str(weights / "best.pt") if (weights / "best.pt").exists() else None,
        "last": str(weights / "last.pt") if (weights / "last.pt").exists() else None,
        "wall_time_s": round(time.time() - started, 2),
        **extra,
    }
    write_json_atomic(run_dir / SUMMARY, summary)
    events.emit("done", **summary)
    return summary


def read_events(run_dir: Path) -> list[dict]:
    return list(EventTail(run_dir / EVENTS).read_new())


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
