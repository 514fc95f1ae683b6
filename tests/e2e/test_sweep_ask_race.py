"""Workers asking at the same instant never get the same trial. Optuna hands out a WAITING trial
(enqueued, or a failed trial's retry) by reading its state and then setting RUNNING; on SQLite that
read and write were not one step, and every worker that asked at once took the same trial (4 of 4,
in every round; one then crashed telling it). study._begin_immediate makes them one; PostgreSQL's
row lock already did."""

from __future__ import annotations

import multiprocessing
import time

import pytest

ASKERS = 4


def _ask_at(url: str, name: str, start: float, out) -> None:
    import optuna

    from orchestrator.sweep.study import make_storage

    study = optuna.load_study(study_name=name, storage=make_storage(url))
    while time.time() < start:  # every process asks at this instant
        time.sleep(0.0005)
    out.put(study.ask().number)


def _asked_at_once(url: str, name: str) -> list[int]:
    """The trial numbers ASKERS processes got, asking together for a study's one WAITING trial."""
    import optuna

    from orchestrator.sweep.study import make_storage

    optuna.create_study(study_name=name, storage=make_storage(url)).enqueue_trial({"x": 1.0})
    ctx = multiprocessing.get_context("spawn")  # each asker its own interpreter, as the workers are
    out = ctx.Queue()
    start = time.time() + 6  # after every interpreter has imported optuna and opened the study
    procs = [ctx.Process(target=_ask_at, args=(url, name, start, out)) for _ in range(ASKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * ASKERS
    return sorted(out.get(timeout=5) for _ in procs)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_workers_asking_at_once_each_get_their_own_trial(tmp_path, backend, request):
    from orchestrator.sweep.study import check_url

    url = f"sqlite:///{tmp_path / 'study.db'}" if backend == "sqlite" else check_url(request.getfixturevalue("pg_url"))
    assert _asked_at_once(url, "race") == list(range(ASKERS))  # the WAITING trial 0 once, then new ones
