"""events.jsonl: the training process's one JSON object per line, written (EventWriter) and read back whole
lines only (EventTail, parse_event: every reader of events reads lines through it), and the epochs it
records as trained (a later `rewind` event takes epochs back)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator


def float_or_none(value: Any) -> float | None:
    """A metric as a plain float (tensors, numpy scalars), None when it is none or not a number."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
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
