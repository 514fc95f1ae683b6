"""The run registry: every run's record and the one owner of its life.

    states.py   RunState, the table of legal moves between states (MOVES), and its checks
    store.py    Registry: the SQLite database of runs; `move()` is the only writer of a run's state

A run's state is written nowhere else (tests/unit/test_architecture.py holds every other module to that).
"""

from orchestrator.registry.states import ACTIVE, ENDED, MOVES, RESUMABLE, IllegalMove, RunState, check_move, moves_table
from orchestrator.registry.store import (COLUMNS, DB_NAME, ENV_PATH, JSON_COLUMNS, STATES, NotARegistry, Registry,
                                         RegistryError, RegistryUnusable, as_recorded, registry_path)

__all__ = ["ACTIVE", "COLUMNS", "DB_NAME", "ENDED", "ENV_PATH", "JSON_COLUMNS", "MOVES", "RESUMABLE", "STATES",
           "IllegalMove", "NotARegistry", "Registry", "RegistryError", "RegistryUnusable", "RunState", "as_recorded",
           "check_move", "moves_table", "registry_path"]
