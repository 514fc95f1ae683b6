"""What `yolo-orch sweep` does, without the display: check the request, open or resume the study,
start K local worker processes (sweep/trial_loop.py: each runs trials as normal runs), watch them and
stop them on Ctrl-C (`run_workers`). The command line (cli/sweep.py) draws the progress and the report."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from orchestrator.errors import UserError

if TYPE_CHECKING:
    from orchestrator.sweep.outage import StaleTrials

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the repository (workers put it on PYTHONPATH)
STOP_GRACE_S = 60  # after SIGTERM, how long workers get to fail their running trials cleanly


@dataclass
class SweepRequest:
    """A validated sweep with its budgets and storage resolved (flags over the sweep file)."""

    sweep: object  # sweep.loader.LoadedSweep
    base_plan: object  # plan.Plan of the base job
    url: str
    n_trials: int
    timeout: float | None
    epoch_budget: int | None
    workers: int
    notes: list[str] = field(default_factory=list)  # said to the user before anything runs
    groups: list = field(default_factory=list)  # device_groups.DeviceGroup per worker (--devices-per-trial)
    ray: dict | None = None  # the workers placed on a Ray cluster (`--launcher ray`): its settings (address)


def check_flags(n_trials, timeout, epoch_budget, workers, devices_per_trial=None) -> None:
    problems = []
    if devices_per_trial is not None and devices_per_trial < 1:
        problems.append(f"--devices-per-trial: must be at least 1 (got {devices_per_trial})")
    if n_trials is not None and n_trials < 1:
        problems.append(f"--n-trials: must be at least 1 (got {n_trials})")
    if timeout is not None and not timeout > 0:
        problems.append(f"--timeout: must be a positive number of seconds (got {timeout})")
    if epoch_budget is not None and epoch_budget < 1:
        problems.append(f"--epoch-budget: must be at least 1 (got {epoch_budget})")
    if workers is not None and not 1 <= workers <= 256:
        problems.append(f"--workers: must be between 1 and 256 (got {workers})")
    if problems:
        raise UserError(problems)


def prepare(sweep_file: Path, study: str | None = None, storage: str | None = None, n_trials: int | None = None,
            timeout: float | None = None, epoch_budget: int | None = None,
            workers: int | None = None, devices_per_trial: int | None = None, here: bool = True,
            ray: dict | None = None) -> SweepRequest:
    """Validate everything a sweep needs before it runs; UserError (exit 2) names each problem. `here`:
    the trials will run on this machine (not a --dry-run, not a Slurm array), so it must have their
    devices; `ray`: the workers run on a Ray cluster instead (its settings: `ray.address`), which must answer."""
    check_flags(n_trials, timeout, epoch_budget, workers, devices_per_trial)
    if ray is not None and devices_per_trial:
        raise UserError("--devices-per-trial: on Ray each worker reserves the base job's devices on a node of its "
                        "own; give --workers instead")
    from orchestrator.plan import make_plan
    from orchestrator.runner import check_launchable
    from orchestrator.sweep.loader import load_sweep
    from orchestrator.sweep.study import check_sampler_available, check_url, default_storage

    sweep = load_sweep(sweep_file, study=study)
    spec = sweep.spec
    check_sampler_available(spec.sampler)
    base_plan = make_plan(sweep.base)
    if ray is not None:
        check_ray_workers(base_plan, ray)
    elif here:
        check_launchable(base_plan)  # the base job must be runnable here
    url = check_url(storage) if storage else check_url(spec.storage, "storage") if spec.storage else \
        check_url(default_storage(sweep))
    request = SweepRequest(sweep, base_plan, url, n_trials or spec.budget.n_trials,
                           timeout if timeout is not None else spec.budget.timeout,
                           epoch_budget or spec.budget.epochs, workers or spec.workers, ray=ray)
    per_trial = devices_per_trial or spec.devices_per_trial
    if per_trial and ray is None:  # (on Ray, each worker's devices are its actor's: Ray assigns them)
        pin_workers(request, per_trial, workers)
    if spec.sampler.name == "grid":
        size = 1
        for p in sweep.params:
            size *= p.grid_size()
        if request.n_trials > size:
            request.notes.append(f"grid has {size} points: n_trials {request.n_trials} -> {size}")
            request.n_trials = size
    return request


def check_ray_workers(base_plan, ray: dict) -> None:
    """Sweep workers on Ray: the cluster answers, and each trial trains on one node (the base job's devices)."""
    from orchestrator.devices import parse_devices
    from orchestrator.launch import ray_backend

    if base_plan.job.spec.target.launcher:
        raise UserError(f"--launcher: the base job is placed on {base_plan.job.spec.target.launcher} "
                        "(target.launcher); a sweep worker on Ray trains its trials on its own node")
    missing = ray_backend.unavailable(ray)
    if missing:
        raise UserError(f"--launcher: {missing}")
    devices = parse_devices(base_plan.devices)
    if devices.nodes > 1 or devices.kind not in ("cpu", "cuda"):
        raise UserError(f"--launcher: a sweep worker on Ray trains its trials on one node; the base job's devices "
                        f"'{devices.text}' are not CPU processes or GPUs of one node")


def pin_workers(request: SweepRequest, per_trial: int, workers: int | None) -> None:
    """One worker per device group; --workers may ask for fewer, not more."""
    from orchestrator.sweep.device_groups import device_groups

    groups = device_groups(request.base_plan.devices, per_trial)
    if workers is not None and workers > len(groups):
        raise UserError(f"--workers: {workers} workers, but --devices-per-trial {per_trial} makes {len(groups)} "
                        "device group(s) here; one worker per group")
    request.groups = groups[:workers or len(groups)]
    request.workers = len(request.groups)
    request.notes.append("workers pinned to " + "; ".join(g.label for g in request.groups))


def open_for_run(request: SweepRequest):
    """Create or resume the study, queue the first points; (study, the status line, whether trials
    remain to run). Raises study.StorageError when the storage cannot be used."""
    from orchestrator.sweep.study import (done_count, enqueue_initial, epochs_spent, open_study, record_sweep,
                                          redact, state_counts)

    sweep = request.sweep
    study = open_study(sweep, request.url, heartbeat=True)
    record_sweep(study, sweep)
    queued = enqueue_initial(study, sweep)
    trials = study.get_trials(deepcopy=False)
    done = done_count(state_counts(study, trials))
    spent = epochs_spent(study, trials)
    status = (f"study [bold]{sweep.study}[/] ({redact(request.url)}): "
              + (f"resuming with {done} trial(s) done, " if len(trials) - queued else "new, ")
              + f"target {request.n_trials} complete+pruned; {request.workers} "
              + ("Ray" if request.ray is not None else "local") + " worker(s)"
              + (f", timeout {request.timeout:g} s" if request.timeout else "")
              + (f", epoch budget {request.epoch_budget} ({spent} spent)" if request.epoch_budget else ""))
    remaining = done < request.n_trials and not (request.epoch_budget and spent >= request.epoch_budget)
    return study, status, remaining


def start_workers(request: SweepRequest) -> list[tuple[subprocess.Popen, Path]]:
    """K `python -m orchestrator.sweep.trial_loop` processes, each with its log file: here, or each on a node
    of the Ray cluster (launch/ray_workers.start_on_ray: a RayProcess, which the loop below waits on and stops
    as it does a process)."""
    commands = worker_commands(request)
    for _, _, log in commands:
        log.parent.mkdir(parents=True, exist_ok=True)
    if request.ray is not None:
        from orchestrator.devices import parse_devices
        from orchestrator.launch import ray_backend, ray_workers
        from orchestrator.sweep.study import ENV_STORAGE

        on_node = [(cmd, {ENV_STORAGE: request.url, "PYTHONUNBUFFERED": "1"}, log) for cmd, _, log in commands]
        bundle = ray_backend.bundle_of(parse_devices(request.base_plan.devices))
        return list(zip(ray_workers.start_on_ray(request.ray, on_node, bundle), (log for *_, log in commands)))
    started = []
    for cmd, worker_env, log_path in commands:
        with open(log_path, "ab", buffering=0) as log:
            # same process group as this command: Ctrl-C or a kill of the group reaches the workers;
            # each trial's training process has its own session and dies with its worker.
            started.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                             env=worker_env), log_path))
    return started


def worker_commands(request: SweepRequest) -> list[tuple[list[str], dict[str, str], Path]]:
    """Each worker's command, environment and log file."""
    from orchestrator.sweep.study import ENV_STORAGE

    sweep = request.sweep
    log_dir = sweep.study_dir / "workers"
    env = {**os.environ, ENV_STORAGE: request.url, "YOLO_ORCH_SWEEP_CLI": str(os.getpid()), "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    commands = []
    for i in range(request.workers):
        log_path = log_dir / f"{socket.gethostname()}-{os.getpid()}-w{i}.log"
        cmd = [sys.executable, "-m", "orchestrator.sweep.trial_loop", str(sweep.path), "--study", sweep.study,
               "--n-trials", str(request.n_trials), "--index", str(i)]
        if request.timeout:
            cmd += ["--timeout", str(request.timeout)]
        if request.epoch_budget:
            cmd += ["--epoch-budget", str(request.epoch_budget)]
        worker_env = env
        if request.groups:
            group = request.groups[i]
            cmd += ["--devices", group.trial_devices(request.base_plan.devices), "--group", group.label]
            worker_env = {**env, **group.env()}
            if group.kind == "cpu":
                cmd += ["--cpus", ",".join(map(str, group.ids))]
        commands.append((cmd, worker_env, log_path))
    return commands


def stop_workers(procs: list[subprocess.Popen]) -> None:
    """SIGTERM (their running trials end as FAIL), then SIGKILL after the grace period."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.time() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@dataclass(frozen=True)
class WorkersEnded:
    """How the local workers ended: each one's exit code (130 each after an interrupt) and, for each that
    failed, its log file and last lines."""

    codes: list[int]
    interrupted: bool
    failed: list[tuple[int, Path, str]]  # (exit code, log, its last lines)


def run_workers(request: SweepRequest, study, on_progress: Callable[[int, str], None],
                on_stopping: Callable[[], None] = lambda: None, poll_s: float = 2.0) -> WorkersEnded:
    """Start the workers and wait for them, telling `on_progress(trials done, status text)` every `poll_s`;
    a Ctrl-C or SIGTERM stops them (`on_stopping` first: their running trials end as FAIL and are queued
    again). The command draws the progress; this owns the processes."""
    from orchestrator.launch import process
    from orchestrator.sweep.outage import StaleTrials

    stale = StaleTrials(request.sweep.spec.heartbeat.interval)
    started = start_workers(request)
    procs = [p for p, _ in started]
    # the status shows the best value of a single-objective study (its direction read once: it never changes)
    maximize = study.directions[0].name == "MAXIMIZE" if len(study.directions) == 1 else None

    def tick() -> None:
        seen = progress_of(study, maximize, stale)
        if seen is not None:
            on_progress(*seen)

    try:
        with process.interrupts_raise():
            while any(p.poll() is None for p in procs):
                tick()
                time.sleep(poll_s)
    except process.Interrupted:
        on_stopping()
        stop_workers(procs)
        return WorkersEnded([130 for _ in procs], True, [])
    tick()
    failed = [(p.returncode, log, "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
              for p, log in started if p.returncode != 0]
    return WorkersEnded([p.returncode for p in procs], False, failed)


def progress_of(study, maximize: bool | None, stale: "StaleTrials") -> tuple[int, str] | None:
    """(trials done, a status text) from one storage read; None when the database is busy or away."""
    from orchestrator.sweep.study import done_count, epochs_spent, state_counts

    try:
        stale.fail(study)  # a dead worker's trial turns FAIL (and is retried) even while all others train
        trials = study.get_trials(deepcopy=False)
    except Exception:  # noqa: BLE001 - a busy database: try again next tick
        return None
    c = state_counts(study, trials)
    info = (f"running {c['RUNNING']}  pruned {c['PRUNED']}  failed {c['FAIL']}  "
            f"epochs {epochs_spent(study, trials)}  {_best_text(trials, maximize)}")
    return done_count(c), info


def _best_text(trials: list, maximize: bool | None) -> str:
    """`study.best_value` from already-fetched trials: the best COMPLETE value of a single objective."""
    values = [t.value for t in trials if t.state.name == "COMPLETE"] if maximize is not None else []
    if not values:
        return ""
    return f"best {(max if maximize else min)(values):.5g}"


def final_report(request: SweepRequest, started: float, say) -> dict:
    """The study's summary once the workers ended (written beside it: report, best.yaml, plots), waiting
    for a storage that is away (sweep/outage.py); `say`: one line per wait."""
    from orchestrator.sweep import mlflow_study, report
    from orchestrator.sweep.outage import retrying
    from orchestrator.sweep.study import open_study

    def read() -> dict:
        study = open_study(request.sweep, request.url, heartbeat=False, create=False)
        summary = report.write_report(study, request.sweep, request.url, request.n_trials, time.time() - started,
                                      request.epoch_budget)
        mlflow_study.finish_parent(study, summary.get("best"), say)  # nothing when the job has no MLflow
        return summary

    return retrying(read, say, "reading the study for its report")
