"""One read model of a run directory, for every reader that shows a run (`runs`/`show`/`logs` through the
application layer, and the dashboard): its summary, its contract, its last epoch, its files, its log as
text. Reads only: nothing here writes, creates or locks. Strict readers raise on a damaged file (the
dashboard shows the part as damaged); the `_or_none` ones give None (a command shows what it can)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from orchestrator.rundir.events import parse_event
from orchestrator.rundir.files import load_own_yaml
from orchestrator.rundir.names import BEST, ENV, EVENTS, LAST, LOG, RESULTS, SUMMARY
from orchestrator.rundir.resolved import RESOLVED

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")  # colour and cursor codes a terminal would interpret
REDRAWN = re.compile(rb"[^\n]*\r(?!\n)")  # a progress bar redrawn with \r: keep its last state
SHOWN_FILES = (LOG, EVENTS, str(LAST), str(BEST), RESULTS)  # what `show` names


def as_text(data: bytes) -> bytes:
    """A log as a file reader sees text: without colour codes, each redrawn progress line in its final state."""
    return REDRAWN.sub(b"", ANSI.sub(b"", data))


def tail(path: Path, limit: int) -> bytes:
    """The last `limit` bytes of a file."""
    with open(path, "rb") as f:
        f.seek(max(0, Path(path).stat().st_size - limit))
        return f.read()


def _json_file(path: Path) -> dict | None:
    """A JSON object file; None when it is absent; ValueError when it is not a JSON object."""
    if not path.is_file():
        return None
    loaded = json.loads(path.read_text(errors="replace"))
    if not isinstance(loaded, dict):
        raise ValueError(f"{path.name} is not a JSON object")
    return loaded


def summary(run_dir: Path) -> dict | None:
    """summary.json (the worker's last word); ValueError when damaged."""
    return _json_file(Path(run_dir) / SUMMARY)


def summary_or_none(run_dir: Path) -> dict | None:
    try:
        return summary(run_dir)
    except (OSError, ValueError, RecursionError):  # damaged: the registry row still says it all
        return None


def environment(run_dir: Path) -> dict | None:
    """env.json (versions, devices, commit); ValueError when damaged."""
    return _json_file(Path(run_dir) / ENV)


def contract_document(run_dir: Path) -> dict | None:
    """job.resolved.yaml as written (a mapping, unchecked: for showing it); ValueError when damaged."""
    path = Path(run_dir) / RESOLVED
    if not path.is_file():
        return None
    doc = load_own_yaml(path.read_text()) or {}
    if not isinstance(doc, dict):
        raise ValueError(f"{RESOLVED} is not a mapping")
    return doc


def last_epoch(run_dir: Path) -> dict | None:
    """The newest whole `epoch` event of events.jsonl, None when there is none."""
    path = Path(run_dir) / EVENTS
    if not path.is_file():
        return None
    for line in reversed(path.read_bytes().splitlines()):
        event = parse_event(line)
        if event is not None and event.get("event") == "epoch":
            return event
    return None


def named_files(run_dir: Path) -> dict[str, str | None]:
    """The files `show` names (log, events, weights, results.csv): each path, or None where it is absent."""
    return {name: str(Path(run_dir) / name) if (Path(run_dir) / name).exists() else None for name in SHOWN_FILES}


def all_files(run_dir: Path, limit: int) -> list[dict]:
    """Every regular file of the run (at most `limit`), relative paths and sizes; links are listed never
    and followed never, hidden files and W&B's folder left out. FileNotFoundError when the folder is gone."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir} does not exist")
    found = []
    for root, dirs, names in os.walk(run_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "wandb")
        for name in sorted(names):
            path = Path(root) / name
            if name.startswith(".") or path.is_symlink():
                continue
            found.append({"path": str(path.relative_to(run_dir)), "bytes": path.stat().st_size})
            if len(found) >= limit:
                return found
    return found
