"""orchestrator/errors.py: two kinds of failure, each with its exit code, raised where they belong."""

from __future__ import annotations

from conftest import run_cli
from orchestrator import errors
from orchestrator.errors import UserError
from orchestrator.registry import NotARegistry, RegistryUnusable
from orchestrator.sweep.study import StorageError


def test_each_error_is_of_one_kind():
    assert UserError is errors.UserError and issubclass(NotARegistry, errors.UserError)
    assert issubclass(RegistryUnusable, errors.EnvError) and issubclass(StorageError, errors.EnvError)
    assert not issubclass(errors.EnvError, errors.UserError) and not issubclass(errors.UserError, errors.EnvError)
    assert (errors.EXIT_FAILED, errors.EXIT_BAD_INPUT) == (1, 2)
    assert errors.RUN_EXIT_CODES == {"finished": 0, "killed": 130, "stalled": 124}


def test_the_command_line_maps_them_to_their_codes(tmp_path):
    other = tmp_path / "other.db"  # another program's SQLite file named as the registry: bad input
    import sqlite3

    con = sqlite3.connect(other)
    con.execute("CREATE TABLE notes (x)")
    con.close()
    bad = run_cli("runs", "--registry", other, cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    env = run_cli("runs", "--registry", damaged, cwd=tmp_path)
    assert env.returncode == 1 and "damaged" in env.stderr and "Traceback" not in env.stderr, env.stderr
