"""A registry row written by hand, for the few tests that model a record no chain of legal moves reaches from
where their run is: a run that really finished, made to look as a kill during its final validation leaves it.
Everything else reaches its state by moves (orchestrator.harness.runs.walk_to). Test code only: the package
writes a run's state through Registry.move alone (tests/unit/test_architecture.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def forge_row(db: Path, run_id: str, **columns) -> None:
    con = sqlite3.connect(db)
    try:
        with con:
            sets = ", ".join(f"{k} = ?" for k in columns)
            assert con.execute(f"UPDATE runs SET {sets} WHERE id = ?", [*columns.values(), run_id]).rowcount == 1
    finally:
        con.close()
