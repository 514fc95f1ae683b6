"""The run registry: every run's record and the one owner of its life.

    states.py   RunState, the table of legal moves between states (MOVES), and its checks
    record.py   Run: a run as recorded, typed and frozen (what every read returns)
    query.py    the one query of the runs table, for `yolo-orch runs` and the dashboard
    store.py    Registry: the SQLite database of runs; `move()` is the only writer of a run's state

A run's state is written nowhere else (tests/unit/test_architecture.py holds every other module to that).
"""

from orchestrator.registry.record import Note, Run
from orchestrator.registry.states import ACTIVE, ENDED, MOVES, RESUMABLE, IllegalMove, RunState, check_move, moves_table
from orchestrator.registry.store import (COLUMNS, DB_NAME, ENV_PATH, JSON_COLUMNS, STATES, NotARegistry, Registry,
                                         RegistryError, RegistryUnusable, registry_path)

__all__ = ["ACTIVE", "COLUMNS", "DB_NAME", "ENDED", "ENV_PATH", "JSON_COLUMNS", "MOVES", "RESUMABLE", "STATES",
           "IllegalMove", "Note", "NotARegistry", "Registry", "RegistryError", "RegistryUnusable", "Run", "RunState",
           "check_move", "moves_table", "registry_path"]
