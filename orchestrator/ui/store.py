"""What the dashboard shows, read from the registry and the run directories, and never written.

The registry is opened read-only (`mode=ro`, else `immutable=1`) and read through its one query
(registry/query.py, which `yolo-orch runs` uses too): a run whose process vanished is shown killed, as every
read of the registry shows it, and nothing is written. A run directory is read through the run-directory
contract's names; anything unreadable makes that part `damaged` with the reason, never an error page.
Text that may hold a secret (logs, storage URLs, W&B or Kaggle settings) is masked on the way out, and
a file is served only from inside its run's folder."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

from orchestrator.registry import STATES, Run, query
from orchestrator.rundir import EVENTS, LOG, RESOLVED, load_resolved, parse_event
from orchestrator.rundir import reading
from orchestrator.tasks import TASKS, headline, task_of_keys
from orchestrator.urls import MASK, SECRET_KEY_NAME, redact_text, redact_url

PAGE_SIZE = 50
LOG_TAIL_BYTES = 64 * 1024
MAX_FILES = 300
MAX_EVENTS_BYTES = 32 << 20  # an events.jsonl past this is read from its tail (a run of many thousand epochs)
MAX_CURVES = 64  # curves a run page draws (every loss, metric and learning rate of any task fits)
MAX_TAILS = 256  # runs whose events the dashboard keeps parsed
MAX_TEXT_BYTES = 8 << 20  # a text file is served from its tail past this, masked
SECRET_KEY = SECRET_KEY_NAME  # a value under such a key is masked whatever it holds
# the events the run page's timeline shows: starts (a resume or a requeue starts at start_epoch > 0),
# OOM recoveries, stalls, Kaggle sessions, warnings, the end
TIMELINE_EVENTS = ("train_start", "oom", "oom_restart", "stalled", "session_start", "session_end", "warning",
                   "final_eval", "done")


class Store:
    """One registry, read-only. Thread-safe: a connection per call (SQLite connections are cheap); each
    run's events.jsonl is read on from where the last read ended (EventsTail), under a lock."""

    def __init__(self, registry: Path):
        self.registry = Path(registry)
        self._task_memo: dict[tuple[str, float], str | None] = {}
        self._tails: dict[str, EventsTail] = {}
        self._lock = threading.Lock()

    def check(self) -> None:
        """Raises OSError (one line) unless the registry is one this dashboard can read: a file that is
        text, random bytes or another program's SQLite database is refused when the dashboard starts."""
        with self._connect() as conn:
            try:
                query.check_readable(conn)
            except sqlite3.Error as exc:  # a `runs` table of another program's
                raise OSError(f"registry {self.registry} cannot be read as a yolo-orch registry ({exc})") from None

    def _connect(self) -> closing[sqlite3.Connection]:
        """A read-only connection for one call, closed after it."""
        try:
            conn = query.open_readonly(self.registry)
        except sqlite3.Error as exc:
            raise OSError(f"registry {self.registry} cannot be read as a yolo-orch registry ({exc})") from None
        return closing(conn)

    # ---------------------------------------------------------------- runs
    def runs(self, name: str = "", state: str = "", devices: str = "", tags: str = "", task: str = "",
             page: int = 0, size: int = PAGE_SIZE) -> dict:
        """One page of runs, newest first, with the filters (substrings; state and task exact): the registry's
        one query (registry/query.py), the task read from each run's job.resolved.yaml (memoized per file)."""
        flt = query.RunFilter(state=state if state in STATES else None, text=name, devices=devices, tags=tags)
        keep = (lambda row: self.task_of(row) == task) if task in TASKS else None
        with self._connect() as conn:
            total, rows = query.runs_page(conn, flt, page, size, keep)
        return {"total": total, "page": page, "size": size, "runs": [self.shown(r) for r in rows]}

    def shown(self, run: Run) -> dict:
        """A run as recorded (a vanished run shows killed, as `yolo-orch runs` shows it), in its JSON form with
        what the dashboard adds: its headline metrics, task, wall time; its free text masked."""
        record = run.as_dict()
        record["headline"] = [[label, value] for label, value in headline(run.metrics)] if run.metrics else []
        record["task"] = self.task_of(run)
        record["wall_s"] = _wall(record)
        record["active"] = run.active
        for key in ("notes", "tags"):  # the row's free text: a note may quote an error, which may quote a secret
            record[key] = mask(record[key])
        return record

    def task_of(self, run: Run) -> str | None:
        run_dir = run.folder or Path("")
        try:
            key = (str(run_dir), (run_dir / RESOLVED).stat().st_mtime)
        except OSError:
            return task_of_keys(run.metrics) if run.metrics else None
        if key not in self._task_memo:
            try:
                self._task_memo[key] = load_resolved(run_dir).job.task
            except Exception:  # noqa: BLE001 - a damaged file has no task; the run page says why
                self._task_memo[key] = None
        return self._task_memo[key]

    def get(self, run_id: str) -> dict | None:  # (the run's JSON form, as shown)
        with self._connect() as conn:
            row = query.run_row(conn, run_id)
        return self.shown(row) if row is not None else None

    def studies(self) -> list[dict]:
        with self._connect() as conn:
            return query.studies(conn)

    def trials(self, study: str) -> list[dict]:
        with self._connect() as conn:
            return [self.shown(r) for r in query.trials(conn, study)]

    # ---------------------------------------------------------------- one run's folder
    def detail(self, record: dict) -> dict:
        """Everything the run page shows; each part is its value or {"damaged": why}."""
        run_dir = Path(record.get("run_dir") or "")
        out = {"run": record, "run_dir": str(run_dir)}
        for name, reader in (("resolved", _resolved), ("summary", _summary), ("env", _env), ("events", self.events),
                             ("log", _log_tail), ("files", _files)):
            try:
                out[name] = reader(run_dir)
            except Exception as exc:  # noqa: BLE001 - a damaged part shows as damaged, the page stays up
                out[name] = {"damaged": f"{type(exc).__name__}: {str(exc)[:200]}"}
        return out

    def events(self, run_dir: Path) -> dict:
        """The run's curves and timeline (EventsTail.shown), its events.jsonl read on from the last read."""
        path = Path(run_dir) / EVENTS
        with self._lock:
            tail = self._tails.get(str(path))
            if tail is None:
                if len(self._tails) >= MAX_TAILS:  # the oldest opened goes (a dashboard left open for days)
                    self._tails.pop(next(iter(self._tails)))
                tail = self._tails[str(path)] = EventsTail(path)
            return tail.shown()

    def file_path(self, record: dict, relative: str) -> Path | None:
        """The file `relative` inside the run's folder, or None: nothing outside it (`..`, absolute
        paths, links pointing out), and only regular files."""
        run_dir = Path(record.get("run_dir") or "")
        if not run_dir.is_dir() or relative.startswith("/") or "\x00" in relative:
            return None
        try:
            target = (run_dir / relative).resolve()
            inside = target.is_relative_to(run_dir.resolve())
        except (OSError, ValueError):
            return None
        return target if inside and target.is_file() else None

    @staticmethod
    def file_text(path: Path) -> str:
        """A text file of a run as the dashboard serves it: the run page's log tail (_shown_tail) past
        MAX_TEXT_BYTES, saying so."""
        skipped = path.stat().st_size - MAX_TEXT_BYTES
        head = f"[the first {skipped} bytes are not shown]\n" if skipped > 0 else ""
        return head + _shown_tail(path, MAX_TEXT_BYTES)

    def sweep_summary(self, study: str, runs_root: Path) -> dict | None:
        path = runs_root / "sweeps" / study / "summary.json"
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return mask(summary)


# ---------------------------------------------------------------- readers of one run folder

def _resolved(run_dir: Path) -> dict | None:
    doc = reading.contract_document(run_dir)
    return None if doc is None else mask(doc)


def _summary(run_dir: Path) -> dict | None:
    found = reading.summary(run_dir)
    return None if found is None else mask(found)


def _env(run_dir: Path) -> dict | None:
    found = reading.environment(run_dir)
    return None if found is None else mask(found)


class EventsTail:
    """One run's events.jsonl as the run page shows it: per-epoch curves ({key: [values]} with `epoch` the
    x axis) and the timeline's events. Each read parses only the lines written since the last one (a live
    run's long polls cost nothing when nothing was written); a file replaced or cut short is read again.
    A run resumed after a kill repeats no epoch: the last record of an epoch wins."""

    def __init__(self, path: Path):
        self.path = path
        self._reset(None)

    def _reset(self, inode: int | None) -> None:
        self.inode, self.offset, self.bad = inode, 0, 0
        self.epochs: dict[int, dict] = {}
        self.timeline: list[dict] = []

    def shown(self) -> dict:
        self._read_new()
        return {**curves_of(self.epochs), "timeline": self.timeline[-500:], "unreadable_lines": self.bad}

    def _read_new(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return self._reset(None)
        if st.st_ino != self.inode or st.st_size < self.offset:
            self._reset(st.st_ino)
            self.offset = max(0, st.st_size - MAX_EVENTS_BYTES)  # a huge file: its tail
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(max(0, st.st_size - self.offset))
        whole = data.rfind(b"\n") + 1
        self.offset += whole
        for line in data[:whole].splitlines():
            self._add(parse_event(line))

    def _add(self, event: dict | None) -> None:
        if event is None:
            self.bad += 1
            return
        kind = event.get("event")
        if kind == "epoch" and isinstance(event.get("epoch"), int):
            self.epochs[event["epoch"]] = {k: v for k, v in (event.get("metrics") or {}).items()
                                           if isinstance(k, str) and isinstance(v, (int, float))}
        elif kind in TIMELINE_EVENTS:
            try:
                self.timeline.append(mask({k: v for k, v in event.items() if k not in ("metrics",)}))
            except RecursionError:  # nested too deep to show: one unreadable line, not a damaged page
                self.bad += 1
            del self.timeline[:-500]


def curves_of(epochs: dict[int, dict]) -> dict:
    """{"curves": {"epoch": [...], key: [...]}, "curves_left_out": N}: at most MAX_CURVES keys, those
    most epochs report first (a run that logs 500 keys, or other keys each epoch, cannot make a page of
    hundreds of megabytes)."""
    order = sorted(epochs)
    counts: dict[str, int] = {}
    for metrics in epochs.values():
        for key in metrics:
            counts[key] = counts.get(key, 0) + 1
    keys = sorted(sorted(counts), key=lambda k: -counts[k])[:MAX_CURVES]
    curves = {"epoch": order, **{k: [epochs[e].get(k) for e in order] for k in sorted(keys)}}
    return {"curves": curves, "curves_left_out": len(counts) - len(keys)}


def _log_tail(run_dir: Path) -> str | None:
    path = run_dir / LOG
    return _shown_tail(path, LOG_TAIL_BYTES) if path.is_file() else None


def _shown_tail(path: Path, limit: int) -> str:
    """The last `limit` bytes of a text file as the dashboard shows it: as text (colour codes and redrawn
    progress lines dropped), every secret masked."""
    return redacted(reading.as_text(reading.tail(path, limit)).decode("utf-8", errors="replace"))


def _files(run_dir: Path) -> list[dict]:
    return reading.all_files(run_dir, MAX_FILES)


# ---------------------------------------------------------------- helpers

def mask(value: Any) -> Any:
    """A copy with secret-looking keys' values masked and URLs' passwords redacted."""
    if isinstance(value, dict):
        return {k: (MASK if isinstance(k, str) and SECRET_KEY.search(k) and v not in (None, "", False)
                    else mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    if isinstance(value, str):  # (a credential needs no '=' or ':': `Bearer ...`)
        return redacted(value)
    return value


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redacted(text: str) -> str:
    """Free text with every URL's password and secret query values masked, and `password=...` too."""
    return redact_text(_URL.sub(lambda m: redact_url(m.group()), text))


def _wall(record: dict) -> float | None:
    start, end = record.get("started_at"), record.get("ended_at") or record.get("updated_at")
    return round(end - start, 1) if start and end and end >= start else None

