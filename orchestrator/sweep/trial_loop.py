"""A sweep worker process: asks the study for trials and runs them, one at a time, until
the study holds `n_trials` COMPLETE + PRUNED trials (in total, whoever ran them), or the
timeout passes. `yolo-orch sweep --workers K` starts K of these; a machine elsewhere joins
by running the same command with the same --storage and --study. No torch here.

    YOLO_ORCH_SWEEP_STORAGE=URL python -m orchestrator.sweep.trial_loop SWEEP.yaml --study S --n-trials N \
        [--timeout S] [--epoch-budget E]

Crash safety: this process beats for its RUNNING trial (RDB heartbeat). Before each trial
it fails the stale trials of dead workers, whose retries (WAITING) it then runs first. When
the trial budget is covered by trials still RUNNING elsewhere it waits for them rather than
leaving: if their worker died, the retry comes back to it. A storage that goes away and comes
back is waited for (sweep/outage.py): the trial runs by ask and tell here, not `study.optimize`,
whose final tell cannot be retried.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import time
from datetime import datetime
from pathlib import Path

from orchestrator.errors import EXIT_TOO_MANY_FAILURES
from orchestrator.errors import UserError
from orchestrator.launch import process
from orchestrator.sweep.objective import TrialFailed, TrialRunner
from orchestrator.sweep.loader import LoadedSweep, load_sweep
from orchestrator.sweep.outage import Heartbeat, StaleTrials, retrying
from orchestrator.sweep.study import ENV_STORAGE, StorageError, done_count, epochs_spent, open_study, state_counts



def say(text: str) -> None:
    print(f"{datetime.now():%H:%M:%S} [{socket.gethostname()}:{os.getpid()}] {text}", flush=True)


def run_worker(sweep: LoadedSweep, url: str, n_trials: int, timeout: float | None = None, index: int = 0,
               epoch_budget: int | None = None, group: tuple[str, str] | None = None) -> int:
    """`group`: (devices, label) of the device group this worker is pinned to (--devices-per-trial)."""
    started = time.time()
    deadline = started + timeout if timeout else None
    study = retrying(lambda: open_study(sweep, url, heartbeat=True, create=False), say, "opening the study")
    if sweep.spec.sampler.seed is not None:  # fresh draws on resume and per worker, still reproducible
        offset = len(retrying(lambda: study.get_trials(deepcopy=False), say, "reading the study")) + 7919 * index
        study = open_study(sweep, url, heartbeat=True, create=False, seed_offset=offset)
    runner = TrialRunner(sweep, url, say=say, group=group)
    interval = float(sweep.spec.heartbeat.interval)
    poll, stale = min(5.0, interval), StaleTrials(interval)
    failures = 0
    waiting_said = False
    say(f"worker {index} on study '{sweep.study}': target {n_trials} complete+pruned trials"
        + (f" or {epoch_budget} training epochs" if epoch_budget else ""))
    while True:
        if deadline is not None and time.time() >= deadline:
            say("timeout reached: no new trial")
            return 0
        retrying(lambda: stale.fail(study, wait=True), say, "failing stale trials")
        trials = retrying(lambda: study.get_trials(deepcopy=False), say, "reading the study")
        counts = state_counts(study, trials)
        done = done_count(counts)
        if done >= n_trials:
            say(f"study has {done} complete+pruned trials (target {n_trials}): done")
            return 0
        if epoch_budget is not None:
            spent = epochs_spent(study, trials)
            if spent >= epoch_budget:
                say(f"study has spent {spent} training epochs (budget {epoch_budget}): done")
                return 0
        if done + counts["RUNNING"] >= n_trials and counts["WAITING"] == 0:
            if not waiting_said:
                say(f"{counts['RUNNING']} trial(s) running elsewhere cover the budget; waiting for them")
                waiting_said = True
            time.sleep(poll)
            continue
        waiting_said = False
        try:
            state = run_trial(study, runner, interval)
        except KeyboardInterrupt:  # (a second signal is ignored: see main's `stop`)
            retry_interrupted(study, sweep)
            raise
        if state == "FAIL":
            failures += 1
            if failures >= sweep.spec.budget.max_consecutive_failures:
                say(f"{failures} trials failed in a row: this worker stops (see the run logs)")
                return EXIT_TOO_MANY_FAILURES
        else:
            failures = 0


def run_trial(study, runner: TrialRunner, interval: float) -> str:
    """Ask for a trial, train it while beating for it, tell its outcome (each storage call waited for
    through an outage); its final state's name. Ctrl-C/SIGTERM: FAIL told, then KeyboardInterrupt."""
    import optuna
    from optuna.trial import TrialState

    trial = retrying(study.ask, say, "asking for a trial")
    state, value = TrialState.FAIL, None
    try:
        with Heartbeat(study._storage, trial._trial_id, interval):
            value = runner(trial)
        state = TrialState.COMPLETE
    except optuna.TrialPruned:
        state = TrialState.PRUNED
    except TrialFailed as exc:
        say(f"trial {trial.number} failed: {exc}")
    except BaseException:  # KeyboardInterrupt, or a bug: the trial ends FAIL, its MLflow run first (no storage needed)
        close_interrupted_trial(runner, trial)
        tell(study, trial, TrialState.FAIL, None, patience=30)
        raise
    return tell(study, trial, state, value).name


def close_interrupted_trial(runner: TrialRunner, trial) -> None:
    """The MLflow run of a trial an interrupt ended (the runner's stop of its training, or a SIGTERM when `yolo-orch
    sweep` dies anywhere in the objective), tagged FAIL and ended KILLED if still RUNNING: its run folder is the
    runner's own, so this needs no storage (none before the run was made)."""
    from orchestrator.sweep.mlflow_study import tag_trial

    if runner.run_dir is None:
        return
    try:
        tag_trial(runner.run_dir, "FAIL", say=say, close=True)
    except Exception as exc:  # noqa: BLE001 - an unreadable mlflow.json: the trial is FAIL all the same
        say(f"warning: MLflow: trial {trial.number}'s run was not closed ({type(exc).__name__})")


def tell(study, trial, state, value, patience: float | None = None):
    """study.tell, waited for through an outage; a trial already closed (a retried tell that had landed,
    or failed as stale meanwhile) is left as it is. The state it ends in."""
    kwargs = {} if patience is None else {"patience": patience}
    frozen = retrying(lambda: study.tell(trial, value, state=state, skip_if_finished=True), say,
                      f"recording trial {trial.number}", **kwargs)
    return frozen.state


def retry_interrupted(study, sweep: LoadedSweep) -> None:
    """This worker's last trial, which a Ctrl-C, SIGTERM or the death of `yolo-orch sweep` ended FAIL, is
    queued again (a WAITING copy with the same parameters, Optuna's own retry record), so the next
    run of the sweep trains it instead of losing it: the same as a heartbeat-stale trial."""
    import optuna

    from orchestrator.sweep.study import retry_callback

    trials = study.get_trials(deepcopy=False)
    mine = [t for t in trials if t.user_attrs.get("worker_pid") == os.getpid()]
    if not mine:
        return
    last = max(mine, key=lambda t: t.number)  # the one running when the interrupt came (earlier FAILs stay)
    if last.state == optuna.trial.TrialState.FAIL and last.number not in {
            t.system_attrs.get("failed_trial") for t in trials}:
        retry_callback(sweep)(study, last)
        say(f"trial {last.number} was interrupted: queued again for the next run")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m orchestrator.sweep.trial_loop")
    parser.add_argument("sweep_file", type=Path)
    parser.add_argument("--study", required=True)
    parser.add_argument("--n-trials", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=None)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--epoch-budget", type=int, default=None)
    parser.add_argument("--devices", default=None, help="this worker's trials train on these devices")
    parser.add_argument("--group", default=None, help="its device group, as the summary names it")
    parser.add_argument("--cpus", default=None, help="CPU cores this worker and its trials are pinned to")
    args = parser.parse_args(argv)
    if args.cpus:  # inherited by every process a trial starts
        os.sched_setaffinity(0, {int(c) for c in args.cpus.split(",")})
    url = os.environ.get(ENV_STORAGE)
    if not url:
        print(f"{ENV_STORAGE} is not set: the storage URL travels in the environment", file=sys.stderr)
        return 2

    def stop(signum, frame):  # SIGTERM from `yolo-orch sweep`: Optuna marks the running trial FAIL
        # Ctrl-C reaches the worker and then `yolo-orch sweep` sends SIGTERM: the second must not cut short
        # the trial's close (its training process stopped, FAIL told, its MLflow run ended, the retry queued)
        process.ignore_interrupts()
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in process.INTERRUPTS:
        signal.signal(sig, stop)
    cli = int(os.environ.get("YOLO_ORCH_SWEEP_CLI") or 0)
    if cli > 0:  # a kill -9 of `yolo-orch sweep` ends its workers and their trials too
        process.stop_when_parent_dies(cli)
    try:
        sweep = load_sweep(args.sweep_file, study=args.study)
        return run_worker(sweep, url, args.n_trials, args.timeout, args.index, args.epoch_budget,
                          group=(args.devices, args.group) if args.devices else None)
    except UserError as exc:
        for line in exc.problems:
            print(line, file=sys.stderr)
        return 2
    except StorageError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
