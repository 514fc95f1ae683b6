"""Riding out a study storage that goes away and comes back (a PostgreSQL restart, a network blip).

Optuna gives up at the first lost connection: its heartbeat thread dies silently (so a live trial goes
stale), and `study.optimize` ends with an UnboundLocalError when the final `tell` cannot reach the
database. Here every storage call of a sweep worker is retried with backoff for up to PATIENCE_S; the
heartbeat beats on through an outage (a failed beat is tried again at the next interval); a trial is
declared stale only when it stays stale over two heartbeat intervals, so a trial whose worker comes
back with the database is not failed for the database's absence. No torch here.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, TypeVar

from orchestrator.urls import redact_text

if TYPE_CHECKING:
    import optuna

PATIENCE_S = 600.0  # how long a worker waits for its storage before it gives up (exit 1, one line)
MAX_DELAY_S = 10.0
T = TypeVar("T")


def is_transient(exc: BaseException) -> bool:
    """A lost or refused connection (worth waiting for), as opposed to a wrong URL, a missing study or
    a programming error. Optuna wraps SQLAlchemy's errors in StorageInternalError, and study.StorageError
    keeps the driver's error as its context: look inside."""
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, (OperationalError, InterfaceError)):
            return True
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def reason(exc: BaseException) -> str:
    """The driver's own first line (SQLAlchemy keeps it as `orig`), looked for inside Optuna's wrapper, whose
    message blames the data ("invalid data in the commit, e.g. exceeding max length") for a lost connection."""
    inner, seen = exc, 0
    while inner is not None and getattr(inner, "orig", None) is None and seen < 5:
        inner, seen = inner.__cause__ or inner.__context__, seen + 1
    text = str(getattr(inner, "orig", None) or exc).strip().splitlines()
    return redact_text(text[0] if text else type(exc).__name__)


def retrying(call: Callable[[], T], say: Callable[[str], None], what: str, patience: float = PATIENCE_S) -> T:
    """`call()`, again after 0.5, 1, 2 ... 10 s while the storage is unreachable, for up to `patience`
    seconds; then StorageError (one line). Other errors go up at once."""
    from orchestrator.sweep.study import StorageError

    since, delay = None, 0.5
    while True:
        try:
            result = call()
        except Exception as exc:  # noqa: BLE001 - only transient ones are retried
            if not is_transient(exc):
                raise
            now = time.time()
            if since is None:
                since = now
                say(f"storage unreachable while {what} ({reason(exc)}); retrying for up to {patience:.0f} s")
            elif now - since >= patience:
                raise StorageError(f"storage unreachable for {now - since:.0f} s while {what}: {reason(exc)}; "
                                   "run the same command again once it is back (finished trials are kept)") from None
            time.sleep(delay)
            delay = min(2 * delay, MAX_DELAY_S)
            continue
        if since is not None:
            say(f"storage back after {time.time() - since:.0f} s")
        return result


class Heartbeat:
    """Beats for one RUNNING trial every `interval` seconds in a thread, as Optuna's heartbeat does,
    but a beat that cannot reach the storage is tried again at the next interval instead of ending
    the thread (Optuna's would stop beating for good, and the live trial would go stale)."""

    def __init__(self, storage: "optuna.storages.BaseStorage", trial_id: int, interval: float):
        self._storage, self._trial_id, self._interval = storage, trial_id, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{trial_id}", daemon=True)

    def _run(self) -> None:
        while True:
            try:
                self._storage.record_heartbeat(self._trial_id)
            except Exception:  # noqa: BLE001 - an outage: the next beat tries again
                pass
            if self._stop.wait(self._interval):
                return

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class StaleTrials:
    """Optuna's fail_stale_trials (FAIL, then the retry callback queues a copy), but only for trials
    seen stale on looks at least two heartbeat intervals apart: after an outage every RUNNING trial
    looks stale until its worker beats again, which it does within one interval."""

    def __init__(self, interval: float):
        self.interval = interval
        self._first_seen: dict[int, float] = {}

    def fail(self, study: "optuna.Study", wait: bool = False) -> list[int]:
        """Fail the trials that stayed stale; `wait`: look again after two intervals (a worker between
        trials) rather than at a later call (the sweep command's progress tick). The failed trials' ids."""
        storage = study._storage
        if not hasattr(storage, "_get_stale_trial_ids") or not storage.get_heartbeat_interval():
            return []
        now = time.time()
        stale = storage._get_stale_trial_ids(study._study_id)
        self._first_seen = {i: self._first_seen.get(i, now) for i in stale}
        if wait and stale:
            time.sleep(2 * self.interval)
            now = time.time()
            still = set(storage._get_stale_trial_ids(study._study_id))
            self._first_seen = {i: t for i, t in self._first_seen.items() if i in still}
        ripe = [i for i, t in self._first_seen.items() if now - t >= 2 * self.interval]
        return _fail(study, ripe)


def _fail(study: "optuna.Study", trial_ids: list[int]) -> list[int]:
    """What optuna.storages.fail_stale_trials does, for these trials."""
    import copy

    import optuna
    from optuna.trial import TrialState

    storage, failed = study._storage, []
    for trial_id in trial_ids:
        try:
            if storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                failed.append(trial_id)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another process closed it first
    from orchestrator.sweep.mlflow_study import close_failed_trial

    callback = getattr(storage, "get_heartbeat_stale_trial_callback", storage.get_failed_trial_callback)()
    for trial_id in failed:
        trial = copy.deepcopy(storage.get_trial(trial_id))
        if callback is not None:
            callback(study, trial)
        close_failed_trial(trial, say=lambda line: print(line, file=sys.stderr, flush=True))  # (stdout: --json's)
    return failed
