"""A new SQLite MLflow store opened by several processes at once (a sweep's workers, a trial and its study's
parent run, a test's own client): MLflow creates and migrates it on a client's first open without a lock;
rundir.tracking.mlflow_client holds one beside the store (3 processes through MLflow's own client: 7 of 9
failed with `table ... already exists` or a migration that found no row)."""

from __future__ import annotations

import subprocess
import sys

from conftest import cli_env

OPEN_AT = """import sys, time
from pathlib import Path
from orchestrator.rundir.tracking import mlflow_client
uri, ready = sys.argv[1], Path(sys.argv[2])
(ready / sys.argv[3]).touch()  # MLflow imported: wait for the others, then open the store together
while len(list(ready.iterdir())) < 3:
    time.sleep(0.001)
client = mlflow_client(uri)
client.create_experiment(f"e{sys.argv[3]}")
print("ok", flush=True)
"""


def test_processes_opening_a_new_store_at_once_all_get_it_whole(tmp_path):
    db = tmp_path / "runs" / "mlflow.db"
    db.parent.mkdir()
    uri = f"sqlite:///{db}"
    ready = tmp_path / "ready"  # the start line: each process's file once it has imported MLflow
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_AT, uri, str(ready), str(i)], env=cli_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-1500:] for _, err in outs]
    from orchestrator.rundir.tracking import mlflow_client

    names = {e.name for e in mlflow_client(uri).search_experiments()}
    assert {"e0", "e1", "e2"} <= names
    assert (db.parent / ".mlflow.db.lock").is_file()


def test_the_lock_is_never_taken_through_a_planted_link(tmp_path):
    """A link in the lock's place is not followed (O_NOFOLLOW): the store opens without the lock, the file the
    link names untouched."""
    from orchestrator.rundir.tracking import mlflow_client

    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / ".mlflow.db.lock").symlink_to(target)
    mlflow_client(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()
    assert target.read_text() == "keep"


def test_stores_that_are_not_a_sqlite_file_take_no_lock():
    from orchestrator.rundir.tracking import sqlite_file

    assert sqlite_file("sqlite:////srv/runs/mlflow.db").as_posix() == "/srv/runs/mlflow.db"
    assert sqlite_file("sqlite:///") is None and sqlite_file("postgresql://u@h/db") is None
    assert sqlite_file("http://127.0.0.1:5000") is None and sqlite_file("file:///srv/mlruns") is None
