"""orchestrator/errors.py: the kinds of failure (user, run state, environment), each with its exit code, raised
where they belong, and every error class of the package one of them."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from conftest import REPO, run_cli
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


# Exceptions that are control flow inside one module, never shown to a user: each says why it is no kind.
CONTROL_FLOW = {
    "orchestrator.launch.process.Interrupted": "a signal turned into an exception, caught by its command",
    "orchestrator.sweep.objective.TrialFailed": "a trial's failure, recorded in the study by Optuna",
    "orchestrator.registry.states.IllegalMove": "a move the table of a run's life does not hold: a bug in the "
                                                "caller (what a user asks is refused before any move), a ValueError",
    "orchestrator.kaggle.kernel_runner.RunnerError": "the standalone kernel script: it runs before yolo-orch is "
                                                     "installed, so it imports nothing of the tool",
}


def test_every_error_class_of_the_package_names_its_kind():
    """Each exception class defined in orchestrator/ derives from errors.ToolError (user, run state or
    environment: its kind and exit code), but the few that are control flow (CONTROL_FLOW)."""
    found = {}
    for path in sorted((REPO / "orchestrator").rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, (ast.Name, ast.Attribute)) and ast.unparse(b).endswith(("Error", "Exception"))
                    for b in node.bases):
                found[f"{module}.{node.name}"] = (module, node.name)
    assert len(found) > 15
    kindless = []
    for name, (module, cls) in sorted(found.items()):
        if name in CONTROL_FLOW or module == "orchestrator.errors":
            continue
        klass = getattr(importlib.import_module(module), cls)
        if not issubclass(klass, errors.ToolError):
            kindless.append(name)
    assert kindless == [], kindless


def test_a_lower_layers_lines_go_under_the_callers_field_and_keep_their_kind():
    from orchestrator.devices import DeviceSpecError, parse_devices
    from orchestrator.rundir import ResolvedRunError

    try:
        parse_devices("gpu7")
    except DeviceSpecError as exc:
        under = exc.under("--devices")
    assert isinstance(under, DeviceSpecError) and under.kind == "user" and under.exit_code == 2
    assert under.problems[0].startswith("--devices: 'gpu7' is not a device spec")
    damaged = ResolvedRunError("job.resolved.yaml is not a mapping").under("RUN: r1")
    assert damaged.kind == "run state" and damaged.problems == ["RUN: r1: job.resolved.yaml is not a mapping"]
    assert errors.EnvError("x").kind == "environment" and errors.EnvError("x").exit_code == 1


def test_a_tracker_failure_is_said_by_its_cause_not_sqlalchemys_autoflush_preface():
    """Issue 60: a moved mlflow.db read "(raised as a result of Query-invoked autoflush; ...)"."""
    from orchestrator.worker.trackers import first_line

    error = Exception("(raised as a result of Query-invoked autoflush; consider using a session.no_autoflush block "
                      "if this flush is occurring prematurely)\n(sqlite3.OperationalError) attempt to write a readonly "
                      "database\n[SQL: INSERT INTO metrics ...]")
    assert first_line(error) == "(sqlite3.OperationalError) attempt to write a readonly database"
    assert first_line(Exception("plain\nsecond")) == "plain"


def test_a_lost_database_is_said_in_the_drivers_words_not_optunas():
    """Optuna wraps a connection lost during a commit in StorageInternalError, whose message blames invalid data
    (seen in test_sweep_outage's log): the sweep's outage line quotes the driver's first line instead."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import OperationalError

    from orchestrator.sweep.outage import is_transient, reason

    lost = OperationalError("COMMIT", {}, ConnectionError("server closed the connection unexpectedly\n\tmore"))
    try:
        try:
            raise lost
        except OperationalError as exc:
            raise StorageInternalError("An exception is raised during the commit. This typically happens due to "
                                       "invalid data in the commit, e.g. exceeding max length.") from exc
    except StorageInternalError as wrapped:
        assert is_transient(wrapped) and reason(wrapped) == "server closed the connection unexpectedly"
    assert reason(RuntimeError("plain words")) == "plain words"
