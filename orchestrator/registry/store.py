"""The run registry: one embedded SQLite database of every run and sweep trial.

    reg = Registry.open("runs")              # runs/registry.db (or $YOLO_ORCH_REGISTRY)
    reg.add_run(run_id, job="tiny", run_dir=..., devices="cpu", tags={"study": "s1", "trial": 3})  # queued
    reg.move(run_id, RunState.RUNNING, pid=os.getpid())   # the one writer of state (registry/states.py)
    reg.update(run_id, epochs_done=3, note="...")         # any other column
    reg.get(run_id); reg.resolve("2026"); reg.list(state="running", study="s1")

Safe with several orchestrator processes at once: WAL journal, a busy timeout, and every
write in its own short `BEGIN IMMEDIATE` transaction. Pure standard library (the CLI reads
it without torch).

A run whose process vanished (kill -9, machine restart) is a `queued`/`running` row whose owner
process is gone, or whose PID now belongs to another process (the start time recorded with the PID
no longer matches): it is `killed` (or `finished`, when the worker had already written a finished
summary.json). Reads (`get`, `resolve`, `list`) show such a row as that, and never write: they work on
a registry that cannot be written. `reconcile()` writes it, an explicit step of the commands that
change state (resume, submit). Rows from another host are left alone: PIDs are only meaningful on the
host that wrote them.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from orchestrator.errors import EnvError, UserError
from orchestrator.registry.query import (ACTIVE_SQL, JSON_COLUMNS, RunFilter, decode, like_escaped, run_row,
                                         runs_page, shown, vanished, vanished_outcome)
from orchestrator.registry.record import Run
from orchestrator.registry.states import RunState, check_move
from orchestrator.rundir import process_identity
from orchestrator.sqlite_wal import connect_readonly, enable_wal, foreign_tables, is_busy, is_damaged

STATES = tuple(str(s) for s in RunState)
DB_NAME = "registry.db"
ENV_PATH = "YOLO_ORCH_REGISTRY"
SCHEMA_VERSION = 1

# Columns (name, SQL type). JSON columns hold text; `get`/`list` decode them.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "TEXT PRIMARY KEY"),
    ("job", "TEXT NOT NULL"),
    ("state", "TEXT NOT NULL"),
    ("created_at", "REAL NOT NULL"),
    ("started_at", "REAL"),
    ("ended_at", "REAL"),
    ("updated_at", "REAL"),
    ("devices", "TEXT"),
    ("run_dir", "TEXT"),
    ("host", "TEXT"),
    ("pid", "INTEGER"),  # the supervising orchestrator process
    ("pid_start", "TEXT"),  # its identity: boot id + start time (survives PID reuse checks)
    ("worker_pid", "INTEGER"),  # the training process (group leader)
    ("worker_start", "TEXT"),
    ("exit_code", "INTEGER"),
    ("attempts", "INTEGER NOT NULL DEFAULT 0"),  # how many times the worker was started
    ("epochs_done", "INTEGER"),
    ("epochs", "INTEGER"),
    ("metrics", "TEXT"),  # JSON: final metrics
    ("study", "TEXT"),  # sweep study name (nullable)
    ("trial", "INTEGER"),  # sweep trial number (nullable)
    ("tags", "TEXT"),  # JSON: all tags given at creation
    ("oom_retries", "INTEGER NOT NULL DEFAULT 0"),
    ("notes", "TEXT"),  # JSON list of {"time", "text"}
)
UPDATABLE = {name for name, _ in COLUMNS} - {"id", "created_at"}


class RegistryError(UserError):
    """A run that cannot be found, or an ambiguous prefix (bad input: exit 2)."""


def registry_path(path_or_runs_dir: str | os.PathLike | None = None) -> Path:
    """Where the registry lives. An explicit `*.db` file wins; otherwise $YOLO_ORCH_REGISTRY,
    otherwise `<runs_dir>/registry.db` (runs_dir defaults to `runs`)."""
    if path_or_runs_dir is not None and str(path_or_runs_dir).endswith((".db", ".sqlite", ".sqlite3")):
        return Path(path_or_runs_dir).expanduser().resolve()
    env = os.environ.get(ENV_PATH)
    if env:
        return Path(env).expanduser().resolve()
    return (Path(path_or_runs_dir or "runs").expanduser() / DB_NAME).resolve()


# ---------------------------------------------------------------- the registry

class RegistryUnusable(EnvError):
    """The registry file is damaged, or cannot be written where a write is needed: one line naming
    the file and what to do (exit 1)."""


class NotARegistry(UserError):
    """The file named as the registry is another program's file (bad input: exit 2); it is left untouched."""


READ_ONLY_MARKERS = ("readonly", "read-only", "unable to open", "permission denied", "disk i/o error")


class Registry:
    """Open read-write; a registry that exists but cannot be written (a colleague's runs folder, a
    read-only mount) opens read-only, so `runs`, `show` and `logs` still work (`readonly` is True and
    every write raises RegistryUnusable). A damaged file raises RegistryUnusable at once."""

    def __init__(self, path: Path, timeout_s: float = 30.0):
        self.path = Path(path)
        self._lock = threading.RLock()
        self.readonly = False
        tables = foreign_tables(self.path, "runs", ("id", "job", "state", "created_at"))
        if tables:  # another program's SQLite file: opening it would add `runs` and switch it to WAL
            raise NotARegistry(f"registry {self.path}: an SQLite database of other tables ({', '.join(tables)}), "
                               "not a yolo-orch registry; it was left untouched: name a registry.db or a runs folder")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = self._connect(str(self.path), timeout_s)
            self.journal_mode = enable_wal(self._conn, timeout_s)
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            if is_damaged(exc):
                raise self.damaged(exc) from None
            if not self.path.is_file() or not any(m in str(exc).lower() for m in READ_ONLY_MARKERS):
                raise RegistryUnusable(f"registry {self.path}: {exc}; choose a writable runs_dir or set "
                                       "YOLO_ORCH_REGISTRY") from None
            self._open_readonly(timeout_s)

    def _connect(self, target: str, timeout_s: float) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
        return conn

    def _open_readonly(self, timeout_s: float) -> None:
        try:
            self._conn = connect_readonly(self.path, timeout_s, "SELECT count(*) FROM runs")
        except sqlite3.Error as exc:
            if is_damaged(exc):
                raise self.damaged(exc) from None
            raise RegistryUnusable(f"registry {self.path} cannot be opened, not even read-only ({exc})") from None
        self._conn.row_factory = sqlite3.Row
        self.readonly, self.journal_mode = True, "read-only"

    def damaged(self, exc: BaseException) -> RegistryUnusable:
        return RegistryUnusable(f"registry {self.path} is damaged ({exc}): move it aside (the runs stay on disk; "
                                "a new registry starts empty) and run `yolo-orch doctor`")

    @classmethod
    def open(cls, path_or_runs_dir: str | os.PathLike | None = None) -> "Registry":
        """`Registry.open("runs")`, `Registry.open("/x/registry.db")` or `Registry.open()`."""
        return cls(registry_path(path_or_runs_dir))

    @classmethod
    def of_run(cls, run_dir: str | os.PathLike) -> "Registry":
        """The registry of a run: `<runs_dir>/registry.db` (run_dir = runs_dir/job/run_id), or $YOLO_ORCH_REGISTRY."""
        return cls.open(Path(run_dir).parents[1])

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- schema
    def _migrate(self) -> None:
        """Create or extend the table; a registry that is already current is not written (opening it
        to read works where it cannot be written, e.g. an immutable file)."""
        have = {row[1] for row in self._conn.execute("PRAGMA table_info(runs)")}
        indexes = {row[0] for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if {n for n, _ in COLUMNS} <= have and {"runs_state", "runs_study"} <= indexes and version >= SCHEMA_VERSION:
            return
        with self._write() as c:
            cols = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)
            c.execute(f"CREATE TABLE IF NOT EXISTS runs ({cols})")
            have = {row[1] for row in c.execute("PRAGMA table_info(runs)")}
            for name, kind in COLUMNS:  # forward-compatible: add columns a newer version defines
                if name not in have:
                    c.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind.replace('PRIMARY KEY', '')}")
            c.execute("CREATE INDEX IF NOT EXISTS runs_state ON runs(state)")
            c.execute("CREATE INDEX IF NOT EXISTS runs_study ON runs(study, trial)")
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def check_writable(self) -> None:
        if self.readonly:
            raise RegistryUnusable(f"registry {self.path} is read-only here: runs can be listed, not started or "
                                   "changed; choose a writable runs_dir or set YOLO_ORCH_REGISTRY")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self.check_writable()
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                else:
                    self._conn.execute("COMMIT")
            except sqlite3.Error as exc:  # a full disk, a file made read-only or damaged meanwhile
                raise self.write_failed(exc) from None

    def write_failed(self, exc: BaseException) -> RegistryUnusable:
        if is_damaged(exc):
            return self.damaged(exc)
        if "disk is full" in str(exc).lower():
            fix = "the disk is full: free space, then `yolo-orch resume` continues an interrupted run"
        elif is_busy(exc):
            fix = "another process held it past the 30 s timeout: try again"
        else:
            fix = "check that it is writable (`yolo-orch doctor`)"
        return RegistryUnusable(f"registry {self.path}: {exc}; {fix}")

    # ---- writes
    def add_run(self, run_id: str, job: str, run_dir: str | os.PathLike | None = None, devices: str | None = None,
                tags: dict[str, Any] | None = None, epochs: int | None = None,
                pid: int | None = None, note: str | None = None) -> Run:
        """Insert a row, `queued` (a run's first state). `tags={"study": S, "trial": N, ...}` fills the
        study/trial columns too. `pid` (default: this process) owns the row until a worker starts."""
        tags = dict(tags or {})
        pid = os.getpid() if pid is None else pid
        now = time.time()
        row = {
            "id": run_id, "job": job, "state": str(RunState.QUEUED), "created_at": now, "updated_at": now,
            "devices": devices, "run_dir": str(run_dir) if run_dir is not None else None,
            "host": socket.gethostname(), "pid": pid, "pid_start": process_identity(pid),
            "epochs": epochs, "study": _opt_str(tags.get("study")), "trial": _opt_int(tags.get("trial")),
            "tags": json.dumps(tags, default=str) if tags else None,
            "notes": json.dumps([{"time": now, "text": note}]) if note else None,
        }
        keys = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._write() as c:
            c.execute(f"INSERT INTO runs ({keys}) VALUES ({marks})", list(row.values()))
        return Run.from_row(self._get_raw(run_id))

    def update(self, run_id: str, *, note: str | None = None, **fields: Any) -> Run:
        """Set columns other than `state` (move() writes that). `metrics`/`tags` may be dicts; `note="..."`
        appends to the notes list; `pid=...` records that process's identity too (likewise `worker_pid`)."""
        if "state" in fields:
            raise ValueError("a run's state is written by Registry.move(), against the table of legal moves")
        if self._set(run_id, fields, note) == 0:
            raise RegistryError(f"run '{run_id}' is not in the registry {self.path}")
        return Run.from_row(self._get_raw(run_id))

    def move(self, run_id: str, to: str, *, expect: str | tuple[str, ...] | None = None, note: str | None = None,
             **fields: Any) -> bool:
        """The one writer of a run's state: from the state it is in to `to`, with `fields` in the same write,
        compare-and-set (another process's move in between makes this one lose: False). `expect`: the state(s)
        the caller read and means to move from (False when the run is in another). IllegalMove when the
        table (registry/states.py) holds no such move; RegistryError when there is no such run."""
        to = RunState(to)
        expected = None if expect is None else {RunState(e) for e in ((expect,) if isinstance(expect, str) else expect)}
        with self._lock:
            row = self._conn.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RegistryError(f"run '{run_id}' is not in the registry {self.path}")
        now = RunState(row["state"])
        if expected is not None and now not in expected:
            return False
        check_move(now, to)
        return self._set(run_id, {**fields, "state": str(to)}, note, (str(now),)) == 1

    def _set(self, run_id: str, fields: dict[str, Any], note: str | None,
             expected: tuple[str, ...] | None = None) -> int:
        """One write transaction: the columns, an appended note; only in an `expected` state when
        given. Returns the rows changed (0 or 1)."""
        unknown = set(fields) - UPDATABLE
        if unknown:
            raise ValueError(f"unknown registry field(s): {', '.join(sorted(unknown))}")
        for pid_key, start_key in (("pid", "pid_start"), ("worker_pid", "worker_start")):
            if pid_key in fields and start_key not in fields:
                fields[start_key] = process_identity(fields[pid_key])
        for key in JSON_COLUMNS & fields.keys():
            if fields[key] is not None and not isinstance(fields[key], str):
                fields[key] = json.dumps(fields[key], default=str)
        fields["updated_at"] = time.time()
        with self._write() as c:
            if note:
                old = c.execute("SELECT notes FROM runs WHERE id = ?", (run_id,)).fetchone()
                if old is None:
                    return 0
                fields["notes"] = json.dumps(json.loads(old["notes"] or "[]") + [{"time": time.time(), "text": note}])
            sets = ", ".join(f"{k} = ?" for k in fields)
            where, args = ("", []) if expected is None else (f" AND state IN ({', '.join('?' for _ in expected)})",
                                                              list(expected))
            return c.execute(f"UPDATE runs SET {sets} WHERE id = ?{where}", [*fields.values(), run_id, *args]).rowcount

    def note(self, run_id: str, text: str) -> Run:
        return self.update(run_id, note=text)

    # ---- reads (never write: a vanished run is shown as reconcile() would record it)
    def get(self, run_id: str) -> Run | None:
        with self._lock:
            return run_row(self._conn, run_id)

    def resolve(self, ref: str) -> Run:
        """A run by id, unique id prefix, or `job/id-prefix`. RegistryError when none or several match."""
        ref = ref.strip()
        job = None
        if "/" in ref:
            job, ref = ref.rsplit("/", 1)
        if not ref and not job:
            raise RegistryError("RUN: give a run id or a unique prefix of one")
        exact = self.get(ref) if ref else None
        if exact and (job is None or exact.job == job):
            return exact
        sql, args = "SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\'", [like_escaped(ref) + "%"]
        if job is not None:
            sql += " AND job = ?"
            args.append(job)
        with self._lock:
            rows = [shown(r) for r in self._conn.execute(sql + " ORDER BY created_at DESC LIMIT 11", args)]
        label = f"{job}/{ref}" if job else ref
        if not rows:
            raise RegistryError(f"RUN: no run matches '{label}' in {self.path} (see `yolo-orch runs`)")
        if len(rows) > 1:
            ids = ", ".join(r.id for r in rows[:10])
            raise RegistryError(f"RUN: '{label}' matches several runs ({ids}{', ...' if len(rows) > 10 else ''}); "
                                "give more characters")
        return rows[0]

    def list(self, state: str | None = None, study: str | None = None, job: str | None = None,
             limit: int | None = None) -> list[Run]:
        """Newest first, each as recorded (registry/query.py: the dashboard's query too)."""
        with self._lock:
            return runs_page(self._conn, RunFilter(state=state, study=study, job=job), size=limit)[1]

    def _get_raw(self, run_id: str) -> dict | None:
        with self._lock:
            row = self._conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        return decode(row) if row else None

    # ---- vanished runs
    def reconcile(self) -> list[str]:
        """Record the outcome of active rows whose processes vanished; returns their ids. An explicit
        step of the commands that change state; a read-only registry is left as written."""
        if self.readonly:
            return []
        with self._lock:
            rows = [decode(r) for r in self._conn.execute(
                f"SELECT * FROM runs WHERE state IN {ACTIVE_SQL}")]
        changed = []
        for row in filter(vanished, rows):
            state, note, extra = vanished_outcome(row)
            check_move(row["state"], state)  # the table move() holds to (compare-and-set on updated_at here)
            with self._write() as c:  # compare-and-set: another reader may have done it already
                notes = list(row["notes"] or [])
                notes.append({"time": time.time(), "text": note})
                cur = c.execute(
                    "UPDATE runs SET state = ?, ended_at = COALESCE(ended_at, ?), updated_at = ?, notes = ?"
                    + "".join(f", {k} = ?" for k in extra)
                    + " WHERE id = ? AND state = ? AND updated_at IS ?",
                    [str(state), time.time(), time.time(), json.dumps(notes), *extra.values(),
                     row["id"], row["state"], row["updated_at"]],
                )
            if cur.rowcount:
                changed.append(row["id"])
        return changed


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)


def _opt_int(v: Any) -> int | None:
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None
