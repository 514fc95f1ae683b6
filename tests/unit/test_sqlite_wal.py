"""Several processes opening one SQLite file at once: the WAL switch must not fail any of them.

Two processes converting a rollback-journal file to WAL together deadlock on the header
write; SQLite fails one with "database is locked" at once, not after the busy timeout. CI
hit it in test_registry.py::test_several_processes_at_once (1 run in ~50 here); this test
provokes it on purpose: many rounds of processes released together by a barrier, forked by a small
process of their own (tests/helpers/wal_race.py)."""

import json
import sqlite3
import subprocess
import sys

import pytest

from conftest import REPO

from orchestrator.sqlite_wal import enable_wal, is_busy

ROUNDS = 150
PROCS = 4


def test_registry_opened_by_processes_released_together_never_fails(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tests.helpers.wal_race", str(tmp_path), str(ROUNDS), str(PROCS)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    outcomes = json.loads(r.stdout)
    assert len(outcomes) == ROUNDS * PROCS
    assert set(outcomes) == {"wal"}, [o for o in outcomes if o != "wal"][:3]


def test_enable_wal_gives_up_after_its_timeout_while_the_file_stays_locked(tmp_path):
    path = tmp_path / "held.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")  # nobody else may even read
    con = sqlite3.connect(path, timeout=0.05, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError) as err:
        enable_wal(con, timeout_s=0.3)
    assert is_busy(err.value)
    holder.execute("COMMIT")
    assert enable_wal(con, timeout_s=0.3) == "wal"


def test_other_errors_are_not_retried(tmp_path):
    con = sqlite3.connect(tmp_path / "x.db")
    con.close()
    with pytest.raises(sqlite3.ProgrammingError):
        enable_wal(con, timeout_s=5)
