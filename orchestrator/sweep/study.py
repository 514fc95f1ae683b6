"""Storage, study, sampler and pruner. Imports optuna (and sqlalchemy), never torch
(the GP sampler is the exception: Optuna's GP needs torch and scipy, in the worker only).

Storage is always an Optuna RDBStorage: a SQLite file by default, any SQLAlchemy URL
otherwise (PostgreSQL for workers on several machines). Heartbeats are on: a trial whose
worker died (kill -9, lost machine) turns FAIL after the grace period and is queued again
(`RetryHeartbeatStaleTrialCallback`, the Optuna >= 4.9 name of `RetryFailedTrialCallback`)."""

from __future__ import annotations

import sqlite3
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import EnvError
from orchestrator.errors import UserError
from orchestrator.urls import redact_text, redact_url as redact, with_installed_pg_driver
from orchestrator.rundir.tracking import sqlite_file
from orchestrator.sqlite_wal import enable_wal, is_damaged

if TYPE_CHECKING:
    import optuna

    from orchestrator.sweep.config import Heartbeat, PrunerSpec, SamplerSpec
    from orchestrator.sweep.loader import LoadedSweep, Param

ENV_STORAGE = "YOLO_ORCH_SWEEP_STORAGE"  # how the storage URL reaches workers and trials (never argv, never files)
SQLITE_TIMEOUT_S = 60


def quiet_optuna() -> None:
    import optuna
    from optuna.exceptions import ExperimentalWarning

    warnings.filterwarnings("ignore", category=ExperimentalWarning)
    warnings.filterwarnings("ignore", category=FutureWarning, module="optuna")
    # the worker asks and tells itself, with its own heartbeat (sweep/outage.py)
    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")
    optuna.logging.set_verbosity(optuna.logging.WARNING)


# ----------------------------------------------------------------------------- storage URLs

def default_storage(sweep: "LoadedSweep") -> str:
    return f"sqlite:///{sweep.sweeps_dir / (sweep.study + '.db')}"


def check_url(url: str, flag: str = "--storage") -> str:
    """Parse a SQLAlchemy URL; relative SQLite paths become absolute (workers may run elsewhere)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise UserError(f"{flag}: '{redact(url)}' is not a SQLAlchemy URL ({_reason(exc, url)}); e.g. sqlite:///runs/s.db or "
                        "postgresql://user@host:5432/db") from None
    if parsed.get_backend_name() == "sqlite":
        db = parsed.database or ""
        if db in ("", ":memory:") or db.startswith("file:"):
            raise UserError(f"{flag}: an in-memory SQLite database cannot be shared by workers; give a file path")
        path = Path(db).expanduser()
        if not path.is_absolute():
            path = path.resolve()
        return f"sqlite:///{path}"
    if parsed.get_backend_name() == "postgresql" and "+" not in parsed.drivername:
        return _pick_pg_driver(parsed)
    return url


def _pick_pg_driver(parsed) -> str:
    """The URL with the installed PostgreSQL driver named (urls.with_installed_pg_driver)."""
    return with_installed_pg_driver(parsed.render_as_string(hide_password=False))


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite:")


def _prepare_sqlite(url: str) -> None:
    """Create the folder and switch the file to WAL (persistent in the file): concurrent
    workers, trial processes and heartbeat threads then read while one writes."""
    path = sqlite_file(url)  # the URL _normalize made: a file path, absolute
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(str(path), timeout=SQLITE_TIMEOUT_S)
        try:
            enable_wal(con, SQLITE_TIMEOUT_S)
        finally:
            con.close()
    except (sqlite3.Error, OSError) as exc:
        if is_damaged(exc):
            fix = "it is damaged: move it aside (the runs stay on disk) and start the study again"
        else:
            fix = "it must be writable by every worker: choose another --storage or fix its permissions"
        raise StorageError(f"study file {path}: {exc}; {fix}") from None


def make_storage(url: str, heartbeat: "Heartbeat | None" = None) -> "optuna.storages.RDBStorage":
    """The RDB storage. With `heartbeat`, this process beats for its RUNNING trials and fails
    (and retries) stale ones: that is the worker's storage. Trial processes and readers pass None."""
    import optuna
    from sqlalchemy.exc import IntegrityError, ProgrammingError, SQLAlchemyError

    quiet_optuna()
    engine_kwargs: dict[str, Any] = {}
    if is_sqlite(url):
        _prepare_sqlite(url)
        engine_kwargs["connect_args"] = {"timeout": SQLITE_TIMEOUT_S}
    else:
        engine_kwargs["pool_pre_ping"] = True
    hb: dict[str, Any] = {}
    if heartbeat is not None:
        hb = dict(heartbeat_interval=heartbeat.interval, grace_period=heartbeat.grace)
        callback = _retry_class()(max_retry=heartbeat.max_retry)
        hb["heartbeat_stale_trial_callback" if _has_param("heartbeat_stale_trial_callback")
           else "failed_trial_callback"] = callback
    for attempt in range(6):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **hb)
            if is_sqlite(url):
                _begin_immediate(storage.engine)
            return storage
        except (IntegrityError, ProgrammingError) as exc:
            # several workers creating the tables of an empty database at once: one wins, retry
            if attempt == 5 or "already exists" not in str(exc):
                raise StorageError(f"storage {redact(url)}: cannot create its tables ({_reason(exc, url)})") from None
            time.sleep(0.5 * (attempt + 1))
        except (SQLAlchemyError, ImportError) as exc:
            raise StorageError(f"storage {redact(url)}: cannot open it ({_reason(exc, url)})") from None
    raise AssertionError("unreachable")


def _begin_immediate(engine) -> None:
    """Every transaction on the SQLite file takes its write lock when it begins. Optuna hands out a
    WAITING trial (enqueued, or a retry) by reading its state and then setting RUNNING, relying on
    SELECT ... FOR UPDATE, which SQLite ignores; and the sqlite3 module begins a transaction only at
    the first write. So workers asking at once each read WAITING and each took the same trial (4 of 4
    processes, in 15 rounds of 15). BEGIN IMMEDIATE makes that read and write one step: the next asker
    waits (the busy timeout) and reads RUNNING. SQLAlchemy's documented recipe for pysqlite."""
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _driver_leaves_transactions_to_sqlalchemy(dbapi_connection, _record):
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _take_the_write_lock(connection):
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened before the listeners (creating the tables) go


def _retry_class():
    import optuna

    return getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or \
        optuna.storages.RetryFailedTrialCallback  # Optuna < 4.9


def retry_callback(sweep: "LoadedSweep"):
    """Optuna's retry of a failed trial (a WAITING copy with `failed_trial` set), as the heartbeat
    uses for stale trials; also used for trials a Ctrl-C or a vanished sweep command ended."""
    return _retry_class()(max_retry=sweep.spec.heartbeat.max_retry)


def _reason(exc: BaseException, url: str) -> str:
    return redact_text((str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0], url)


class StorageError(EnvError):
    """The storage is unreachable or unusable (exit 1: not a problem in the sweep file)."""


def _has_param(name: str) -> bool:
    import inspect

    import optuna

    return name in inspect.signature(optuna.storages.RDBStorage.__init__).parameters


# ----------------------------------------------------------------------------- samplers and pruners

def make_sampler(spec: "SamplerSpec", params: list["Param"], seed_offset: int = 0,
                 start: dict[str, Any] | None = None) -> "optuna.samplers.BaseSampler":
    """`seed_offset` keeps resumed or parallel workers from replaying the same random draws:
    a seeded sweep draws with seed + (trials already in the study) + (local worker index).
    `start`: the point `startup: local` draws near (LoadedSweep.start_point())."""
    import optuna

    seed = None if spec.seed is None else spec.seed + seed_offset
    opts: dict[str, Any] = {}
    if spec.n_startup_trials is not None:
        opts["n_startup_trials"] = spec.n_startup_trials
    name = spec.name
    if name == "tpe":
        if spec.multivariate is not None:
            opts["multivariate"] = spec.multivariate
        tpe = optuna.samplers.TPESampler(seed=seed, constant_liar=True, **opts)
        if spec.startup != "local":
            return tpe
        from orchestrator.sweep.local_startup import LocalStartupSampler

        return LocalStartupSampler(tpe, start or {}, spec.local_scale, n_startup_trials=tpe_startup(opts), seed=seed)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, **opts)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, **opts)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        if spec.population_size is not None:
            opts["population_size"] = spec.population_size
        return optuna.samplers.NSGAIISampler(seed=seed, **opts)
    if name == "grid":
        return optuna.samplers.GridSampler({p.name: p.grid() for p in params}, seed=seed)
    raise ValueError(f"unknown sampler {name}")


def tpe_startup(opts: dict) -> int:
    """TPE's n_startup_trials: the sweep's, else Optuna's own default (10 in Optuna 5)."""
    import inspect

    import optuna

    default = inspect.signature(optuna.samplers.TPESampler).parameters["n_startup_trials"].default
    return int(opts.get("n_startup_trials", default))


def make_pruner(spec: "PrunerSpec | dict") -> "optuna.pruners.BasePruner":
    import optuna

    from orchestrator.sweep.config import PrunerSpec

    if isinstance(spec, dict):
        spec = PrunerSpec.model_validate(spec)
    opts = {k: v for k, v in spec.model_dump(exclude={"name"}).items() if v is not None}
    if spec.name == "median":
        return optuna.pruners.MedianPruner(**opts)
    if spec.name == "hyperband":
        return optuna.pruners.HyperbandPruner(**opts)
    if spec.name == "threshold":
        return optuna.pruners.ThresholdPruner(**opts)
    return optuna.pruners.NopPruner()


def check_sampler_available(spec: "SamplerSpec") -> None:
    """Samplers whose extra packages are missing fail at the start, not in the first trial."""
    import importlib.util

    need = {"cmaes": ["cmaes"], "gp": ["scipy", "torch"]}.get(spec.name, [])
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"sampler: {spec.name} needs {' and '.join(missing)} (pip install {' '.join(missing)})")


# ----------------------------------------------------------------------------- study

def open_study(sweep: "LoadedSweep", url: str, heartbeat: bool = False, seed_offset: int = 0,
               create: bool = True) -> "optuna.Study":
    """Create the study or load it (resume). The stored directions must match the sweep's."""
    import optuna

    storage = make_storage(url, sweep.spec.heartbeat if heartbeat else None)
    start = sweep.start_point() if sweep.spec.sampler.startup == "local" else None
    sampler = make_sampler(sweep.spec.sampler, sweep.params, seed_offset, start)
    pruner = make_pruner(sweep.spec.pruner)
    directions = sweep.spec.directions
    if create:
        study = optuna.create_study(study_name=sweep.study, storage=storage, sampler=sampler, pruner=pruner,
                                    directions=directions, load_if_exists=True)
    else:
        study = optuna.load_study(study_name=sweep.study, storage=storage, sampler=sampler, pruner=pruner)
    have = [d.name.lower() for d in study.directions]
    if have != directions:
        raise UserError(f"objective: study '{sweep.study}' in {redact(url)} has direction(s) {have}, this sweep "
                        f"wants {directions}; use another --study or the same objectives")
    return study


def state_counts(study: "optuna.Study", trials: list | None = None) -> dict[str, int]:
    """Trials per state. `trials`: already fetched (one storage read for several tallies)."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    counts = Counter(t.state.name for t in trials)
    return {name: counts.get(name, 0) for name in ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")}


def done_count(counts: dict[str, int]) -> int:
    return counts["COMPLETE"] + counts["PRUNED"]


def epochs_spent(study: "optuna.Study", trials: list | None = None) -> int:
    """Training epochs the study's trials have run: a finished trial's recorded count, else
    one per reported epoch (pruned, failed and running trials). `trials`: already fetched."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    return sum(trial_epochs(t) for t in trials)


def trial_epochs(t: "optuna.trial.FrozenTrial") -> int:
    """Epochs one trial ran: its recorded count once finished, else one per reported epoch."""
    return t.user_attrs.get("epochs", len(t.intermediate_values))


def enqueue_initial(study: "optuna.Study", sweep: "LoadedSweep") -> int:
    """Queue the sweep's `enqueue:` points once per study (a study attribute remembers it)."""
    if not sweep.enqueue or study.user_attrs.get("enqueued"):
        return 0
    for params in sweep.enqueue:
        study.enqueue_trial(params, skip_if_exists=True)
    study.set_user_attr("enqueued", len(sweep.enqueue))
    return len(sweep.enqueue)


def record_sweep(study: "optuna.Study", sweep: "LoadedSweep") -> None:
    """Keep what the study is about in the study itself (shown by reports and the dashboard)."""
    if "space" not in study.user_attrs:
        study.set_user_attr("space", {p.name: p.describe() for p in sweep.params})
        study.set_user_attr("objectives", [o.model_dump() for o in sweep.spec.objectives])
        study.set_user_attr("base_job", sweep.base.spec.name)
