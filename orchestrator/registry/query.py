"""The one query of the runs table, for `yolo-orch runs` (Registry.list) and the dashboard (ui/store.py) alike:
filters, newest first, a page; every row decoded once and shown as recorded (a vanished run reads `killed`, as
reconcile would write it). Reads only: it runs on whatever connection it is given, a read-only one included."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.registry.record import Run
from orchestrator.registry.states import ACTIVE, RunState
from orchestrator.rundir import RESULTS, SUMMARY, completed_epochs, process_alive
from orchestrator.sqlite_wal import connect_readonly

ACTIVE_SQL = "(" + ", ".join(f"'{s}'" for s in ACTIVE) + ")"  # the words themselves: no user text
JSON_COLUMNS = {"metrics", "tags", "notes"}
NEWEST_FIRST = "ORDER BY created_at DESC, id DESC"


@dataclass(frozen=True)
class RunFilter:
    """Which runs: `state` as a run reads (exact), substrings of `text` ("job id"), `devices` and `tags` (their
    JSON), a `study` or `job` by its exact name. Empty or None: any."""

    state: str | None = None
    text: str = ""
    devices: str = ""
    tags: str = ""
    study: str | None = None
    job: str | None = None

    def __post_init__(self):
        if self.state:
            RunState(self.state)  # ValueError: not a state

    def where(self) -> tuple[str, list]:
        clauses, args = [], []
        for column, value in (("job || ' ' || id", self.text), ("devices", self.devices),
                              ("coalesce(tags, '')", self.tags)):
            if value:
                clauses.append(f"{column} LIKE ? ESCAPE '\\'")
                args.append(f"%{like_escaped(value)}%")
        for column, value in (("study", self.study), ("job", self.job)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        if self.state:  # an active row may read as another state (a vanished run): fetched too, then filtered
            clauses.append(f"(state = ? OR state IN {ACTIVE_SQL})")
            args.append(self.state)
        return (f"WHERE {' AND '.join(clauses)}" if clauses else ""), args


def runs_page(conn: sqlite3.Connection, flt: RunFilter, page: int = 0, size: int | None = None,
              keep: Callable[[Run], bool] | None = None) -> tuple[int, list[Run]]:
    """(how many runs match, the page of them), newest first, each as recorded. `keep`: a filter on the row as
    recorded, beside `flt` (the dashboard's task, read from each run's folder). A page of runs with no filter
    on what a row reads as is two indexed queries; one with such a filter scans the matches."""
    where, args = flt.where()
    if not flt.state and keep is None:
        total = conn.execute(f"SELECT count(*) FROM runs {where}", args).fetchone()[0]
        limit = f" LIMIT {int(size)} OFFSET {int(page) * int(size)}" if size else ""
        rows = conn.execute(f"SELECT * FROM runs {where} {NEWEST_FIRST}{limit}", args).fetchall()
        return total, [shown(r) for r in rows]
    matched, total, first = [], 0, page * (size or 0)
    for raw in conn.execute(f"SELECT * FROM runs {where} {NEWEST_FIRST}", args):
        row = shown(raw)
        if (flt.state and row.state != flt.state) or (keep is not None and not keep(row)):
            continue
        total += 1
        if total > first and (not size or len(matched) < size):
            matched.append(row)
    return total, matched


def run_row(conn: sqlite3.Connection, run_id: str) -> Run | None:
    """One run by id, as recorded."""
    row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    return shown(row) if row is not None else None


def studies(conn: sqlite3.Connection) -> list[dict]:
    """Each sweep study with runs: its name, how many trials, when its last one was created (newest first)."""
    rows = conn.execute("SELECT study, count(*) AS trials, max(created_at) AS last FROM runs WHERE study IS "
                        "NOT NULL GROUP BY study ORDER BY last DESC").fetchall()
    return [dict(r) for r in rows]


def trials(conn: sqlite3.Connection, study: str) -> list[Run]:
    """A study's trials' runs, by trial number, as recorded."""
    rows = conn.execute("SELECT * FROM runs WHERE study = ? ORDER BY trial, created_at", (study,)).fetchall()
    return [shown(r) for r in rows]


def open_readonly(path: Path, timeout_s: float = 5.0) -> sqlite3.Connection:
    """A connection that cannot write (`mode=ro`, else `immutable=1`: sqlite_wal.connect_readonly), rows by
    name; sqlite3.Error when the file holds no runs table."""
    conn = connect_readonly(path, timeout_s, "SELECT count(*) FROM runs LIMIT 1")
    conn.row_factory = sqlite3.Row
    return conn


def check_readable(conn: sqlite3.Connection) -> None:
    """sqlite3.Error unless the file holds a yolo-orch runs table (another program's `runs` has other columns)."""
    conn.execute("SELECT id, job, state, run_dir, created_at FROM runs LIMIT 1").fetchall()


def shown(row: sqlite3.Row) -> Run:
    """A row as every read shows it: decoded, as recorded, typed."""
    return Run.from_row(as_recorded(decode(row)))


def decode(row: sqlite3.Row) -> dict:
    """A row with its JSON columns decoded (a value that is no JSON stays the text it is); notes a list."""
    out = dict(row)
    for key in JSON_COLUMNS:
        if isinstance(out.get(key), str) and out[key]:
            try:
                out[key] = json.loads(out[key])
            except ValueError:
                pass
    out["notes"] = out.get("notes") or []
    return out


def as_recorded(row: dict) -> dict:
    """A decoded row as reconcile() would leave it (a vanished run's outcome and note), written or not:
    what every read shows (the CLI's and the dashboard's)."""
    if not vanished(row):
        return row
    state, note, extra = vanished_outcome(row)
    extra = {k: json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v for k, v in extra.items()}
    notes = row.get("notes") if isinstance(row.get("notes"), list) else []
    return {**row, **extra, "state": state, "notes": [*notes, {"time": time.time(), "text": note}]}


def vanished(row: dict) -> bool:
    """An active row of this host whose process (and worker) are gone."""
    if row["state"] not in ACTIVE or row["host"] not in (None, socket.gethostname()):
        return False
    if process_alive(row["pid"], row["pid_start"]):
        return False
    return not (row["worker_pid"] and process_alive(row["worker_pid"], row["worker_start"]))


def vanished_outcome(row: dict) -> tuple[RunState, str, dict]:
    """What a vanished run ended as (finished when its worker wrote a finished summary.json, else killed), the
    note that says so, and the columns that come with it (JSON columns as text, as written)."""
    who = f"pid {row['pid']}" + (f", worker pid {row['worker_pid']}" if row["worker_pid"] else "")
    summary = Path(row["run_dir"]) / SUMMARY if row.get("run_dir") else None
    if summary is not None and summary.is_file():
        try:
            data = json.loads(summary.read_text())
        except (OSError, ValueError):
            data = {}
        if data.get("state") == RunState.FINISHED:
            return (RunState.FINISHED, f"orchestrator process vanished ({who}) after the worker finished",
                    {"metrics": json.dumps(data.get("metrics") or {}),
                     "epochs_done": data.get("epochs_completed")})
    when = "before the worker started" if row["state"] == RunState.QUEUED else "while running"
    extra = {}
    if row.get("run_dir") and (Path(row["run_dir"]) / RESULTS).is_file():
        extra["epochs_done"] = completed_epochs(row["run_dir"])  # epochs Ultralytics recorded (and checkpointed)
    return RunState.KILLED, f"process vanished {when} ({who}: kill -9, crash or reboot); `yolo-orch resume` continues it", extra


def like_escaped(text: str) -> str:
    """`text` for a LIKE pattern, its wildcards literal."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
