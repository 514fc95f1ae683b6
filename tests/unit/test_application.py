"""The application layer (orchestrator/application/), called directly as the commands call it, without a terminal:
what `runs`, `show`, `logs` and `export` read and refuse, and the sweep's worker processes watched and stopped
(real worker processes of `python -m orchestrator.sweep.trial_loop`). The commands themselves are the e2e tests'."""

from __future__ import annotations

import os
import signal

import pytest

from orchestrator.application import runs as app_runs
from orchestrator.application import sweeps
from orchestrator.errors import UserError
from orchestrator.harness.jobs import write_sweep
from orchestrator.harness.runs import walk_to
from orchestrator.registry import Registry, Run, RunState
from orchestrator.rundir import LOG


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """A registry with a finished run (its log written) and a killed one."""
    monkeypatch.delenv("YOLO_ORCH_REGISTRY", raising=False)
    folder = tmp_path / "runs"
    with Registry.open(folder) as reg:
        for run_id, state in (("20260101-000000-aaaa", "finished"), ("20260102-000000-bbbb", "killed")):
            (folder / "tiny" / run_id).mkdir(parents=True)
            reg.add_run(run_id, job="tiny", run_dir=folder / "tiny" / run_id, epochs=2)
            walk_to(reg, run_id, state, epochs_done=2 if state == "finished" else 1)
    (folder / "tiny" / "20260101-000000-aaaa" / LOG).write_text("epoch 1\nepoch 2\n")
    return folder


def test_runs_are_listed_found_and_shown_as_typed_records(runs):
    listed = app_runs.list_runs(runs, None)
    assert [(r.id, r.state) for r in listed.rows] == [("20260102-000000-bbbb", RunState.KILLED),
                                                      ("20260101-000000-aaaa", RunState.FINISHED)]
    assert all(isinstance(r, Run) for r in listed.rows) and listed.path == runs / "registry.db"
    assert [r.id for r in app_runs.list_runs(runs, None, state="killed").rows] == ["20260102-000000-bbbb"]
    found = app_runs.find_run(runs, None, "tiny/20260101")
    assert found.id == "20260101-000000-aaaa" and found.epochs_done == 2
    shown = app_runs.show_run(found)
    assert shown["run"]["state"] == "finished" and shown["run"]["id"] == found.id  # the JSON form
    assert app_runs.log_of(found, follow=False) == found.folder / LOG


def test_what_the_reads_refuse_is_said_and_writes_nothing(runs, tmp_path):
    with pytest.raises(UserError, match="unknown state 'exploded'"):
        app_runs.list_runs(runs, None, state="exploded")
    with pytest.raises(UserError, match="no registry at"):
        app_runs.find_run(tmp_path / "elsewhere", None, "2026")
    assert not (tmp_path / "elsewhere").exists()  # a read never creates a registry or its folder
    killed = app_runs.find_run(runs, None, "20260102")
    with pytest.raises(UserError, match="has no log yet"):
        app_runs.log_of(killed, follow=False)
    with pytest.raises(UserError) as refused:
        app_runs.export_run(killed, ["onnx", "pdf"])
    assert any("'pdf' is not one of" in p for p in refused.value.problems)
    assert any("is killed; only a finished run is exported" in p for p in refused.value.problems)


@pytest.fixture
def sweep_request(tmp_path, monkeypatch):
    """A prepared sweep with its study opened (SQLite), as `yolo-orch sweep` has it before its workers start."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    path = write_sweep(tmp_path, budget={"n_trials": 1})
    request = sweeps.prepare(path)
    study, _, remaining = sweeps.open_for_run(request)
    assert remaining
    return request, study


def test_workers_that_fail_are_told_with_their_logs(sweep_request):
    """The sweep file gone once the workers start (moved away mid-run): each worker refuses it and exits 2; the
    progress was told before the end, and each failure comes back with its log's last lines."""
    request, study = sweep_request
    request.sweep.path.rename(request.sweep.path.with_suffix(".moved"))
    seen = []
    ended = sweeps.run_workers(request, study, on_progress=lambda done, info: seen.append(done), poll_s=0.2)
    assert ended.codes == [2] and not ended.interrupted and seen and seen[-1] == 0
    [(code, log, tail)] = ended.failed
    assert code == 2 and log.parent == request.sweep.study_dir / "workers" and "sweep.yaml" in tail, tail


def test_an_interrupt_stops_the_workers(sweep_request):
    """Ctrl-C while the workers run: `on_stopping` is told, every worker is stopped, and each reads 130."""
    request, study = sweep_request
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    told = []
    try:
        ended = sweeps.run_workers(request, study, on_progress=lambda done, info: os.kill(os.getpid(), signal.SIGINT),
                                   on_stopping=lambda: told.append("stopping"), poll_s=0.2)
    finally:  # the first interrupt leaves the process ignoring the next (launch/process.py): this one goes on
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert ended.interrupted and ended.codes == [130] * request.workers and told == ["stopping"]
    workers = list((request.sweep.study_dir / "workers").glob("*.log"))
    assert len(workers) == request.workers
    assert not _children()  # stopped and reaped


def _children() -> list:
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if "trial_loop" in " ".join(p.cmdline())]
