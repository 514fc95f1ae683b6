"""Switch a SQLite file to WAL when several processes open it at once.

`PRAGMA journal_mode = WAL` reads the header (a SHARED lock) and then writes it. When two
processes convert the same file together, each holds SHARED while waiting for the other's
write lock: SQLite breaks that deadlock by failing one of them with "database is locked"
at once, without waiting out the busy timeout (see sqlite3_busy_handler and "Sometimes
Queries Return SQLITE_BUSY In WAL Mode" in the SQLite docs). The cure is to retry, with a
little random backoff, until the timeout: the winner's conversion is persistent, so the
retry usually finds the file already in WAL.

`is_busy` and `is_damaged` classify the SQLite errors the registry and the sweep studies both meet."""

from __future__ import annotations

import os
import random
import sqlite3
import time
from urllib.parse import quote


def is_busy(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


DAMAGED_MARKERS = ("not a database", "malformed", "file is encrypted")


def is_damaged(exc: BaseException) -> bool:
    """A SQLite file that is not (or no longer) a usable database: move it aside (registry, study)."""
    return any(m in str(exc).lower() for m in DAMAGED_MARKERS)


def enable_wal(conn: sqlite3.Connection, timeout_s: float) -> str:
    """Set WAL on `conn`'s file; returns the journal mode now in force (lower case)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.002
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay * (1 + random.random()))
        delay = min(delay * 2, 0.2)


def connect_readonly(path, timeout_s: float, probe: str) -> sqlite3.Connection:
    """A read-only connection to `path`: `mode=ro` (it reads a WAL database when its -shm can be made),
    else `immutable=1` (a folder nobody may write to: nothing can change the file). `probe` is run to
    prove it reads. A damaged file raises at once; neither opening: the last sqlite3.Error."""
    last: sqlite3.Error | None = None
    for flags in ("mode=ro", "immutable=1"):
        conn = None
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?{flags}", uri=True, timeout=timeout_s,
                                   isolation_level=None, check_same_thread=False)
            conn.execute(probe).fetchone()
            return conn
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            if is_damaged(exc):
                raise
            last = exc
    raise last


def foreign_tables(path, table: str, columns: tuple[str, ...]) -> list[str]:
    """The tables of `path` (at most 5 named) when it is an SQLite database without `table` and its
    `columns`: another program's file. [] when it is one of ours, empty, missing, not SQLite or
    unreadable (the caller's own open says which). Read only, and never opens a FIFO or a device."""
    if not os.path.isfile(path):
        return []
    try:
        with open(path, "rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                return []
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
        try:
            tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return []
    if not tables or set(columns) <= have:
        return []
    return tables[:5] + (["..."] if len(tables) > 5 else [])
