"""Several processes opening one SQLite file at once: the WAL switch must not fail any of them.

Two processes converting a rollback-journal file to WAL together deadlock on the header
write; SQLite fails one with "database is locked" at once, not after the busy timeout. CI
hit it in test_registry.py::test_several_processes_at_once (1 run in ~50 here); this test
provokes it on purpose: many rounds of processes released together by a barrier."""

import multiprocessing as mp
import sqlite3

import pytest

from orchestrator.registry import Registry
from orchestrator.sqlite_wal import enable_wal, is_busy

ROUNDS = 150
PROCS = 4


def _open_registry(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        with Registry.open(path) as reg:
            results.put(reg.journal_mode)
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        results.put(repr(exc))


def test_registry_opened_by_processes_released_together_never_fails(tmp_path):
    ctx = mp.get_context("fork")  # starts in milliseconds: the processes really meet at the barrier
    outcomes = []
    for r in range(ROUNDS):
        path = tmp_path / f"r{r}" / "registry.db"
        path.parent.mkdir()
        con = sqlite3.connect(path)  # an existing file in rollback mode, as an older registry would be
        con.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, job TEXT, state TEXT, created_at REAL)")
        con.commit()
        con.close()
        barrier, results = ctx.Barrier(PROCS), ctx.Queue()
        procs = [ctx.Process(target=_open_registry, args=(str(path), barrier, results)) for _ in range(PROCS)]
        for p in procs:
            p.start()
        outcomes += [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(60)
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
