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

import random
import sqlite3
import time


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
