"""`yolo-orch sweep SWEEP.yaml [--n-trials N] [--timeout S] [--epoch-budget E] [--storage URL]
[--study NAME] [--workers K] [--dry-run] [--json]`

Validates the sweep (exit 2 on bad input, nothing written), creates or resumes the study,
starts K local worker processes (orchestrator/sweep/trial_loop.py), shows progress, then writes
the report (summary table, best.yaml, plots, dashboard command). Imports optuna, never torch
or ultralytics: training runs two processes down (worker -> training process). `--dry-run`
stops after validation and shows the plan (orchestrator/sweep/preview.py): no optuna either."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import err, human, print_json
from orchestrator.spec.errors import SpecError

EXIT_INCOMPLETE = 1


def sweep_cmd(
    sweep_file: Path = typer.Argument(..., help="Sweep spec YAML (see docs/sweeps.md)."),
    n_trials: Optional[int] = typer.Option(None, "--n-trials", help="COMPLETE+PRUNED trials the study must reach "
                                           "in total (overrides budget.n_trials)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds; no new trial starts after it."),
    epoch_budget: Optional[int] = typer.Option(None, "--epoch-budget", help="Training epochs over all trials "
                                               "(pruned ones count what they ran); no new trial starts once "
                                               "the study has spent them (overrides budget.epochs)."),
    storage: Optional[str] = typer.Option(None, "--storage", help="SQLAlchemy URL of the study storage (default: "
                                          "sqlite:///<runs>/sweeps/<study>.db)."),
    study_name: Optional[str] = typer.Option(None, "--study", help="Study name (default: the spec's, else the "
                                             "sweep file's name)."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Local worker processes on this study."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and show the search space as the trials' "
                                 "devices get it; opens no storage, writes nothing."),
    json_out: bool = typer.Option(False, "--json", help="Print a machine-readable summary on stdout."),
) -> None:
    """Hyperparameter sweep with Optuna: sampler, per-epoch pruning, crash-safe distributed workers."""
    problems = []
    if n_trials is not None and n_trials < 1:
        problems.append(f"--n-trials: must be at least 1 (got {n_trials})")
    if timeout is not None and not timeout > 0:
        problems.append(f"--timeout: must be a positive number of seconds (got {timeout})")
    if epoch_budget is not None and epoch_budget < 1:
        problems.append(f"--epoch-budget: must be at least 1 (got {epoch_budget})")
    if workers is not None and not 1 <= workers <= 256:
        problems.append(f"--workers: must be between 1 and 256 (got {workers})")
    if problems:
        raise SpecError(problems)

    from orchestrator.plan import make_plan
    from orchestrator.runner import check_launchable
    from orchestrator.sweep import report
    from orchestrator.sweep.spec import load_sweep
    from orchestrator.sweep.study import (StorageError, check_sampler_available, check_url, default_storage,
                                          done_count, enqueue_initial, epochs_spent, open_study, record_sweep,
                                          redact, state_counts)

    sweep = load_sweep(sweep_file, study=study_name)
    spec = sweep.spec
    check_sampler_available(spec.sampler)
    base_plan = make_plan(sweep.base)
    check_launchable(base_plan)  # the base job must be runnable here
    n_trials = n_trials or spec.budget.n_trials
    timeout = timeout if timeout is not None else spec.budget.timeout
    epoch_budget = epoch_budget or spec.budget.epochs
    workers = workers or spec.workers
    url = check_url(storage) if storage else check_url(spec.storage, "storage") if spec.storage else \
        check_url(default_storage(sweep))
    console = human(json_out)
    if spec.sampler.name == "grid":
        size = 1
        for p in sweep.params:
            size *= len(p.grid())
        if n_trials > size:
            console.print(f"[yellow]grid has {size} points: n_trials {n_trials} -> {size}[/]")
            n_trials = size
    if dry_run:
        from orchestrator.sweep import preview

        summary = preview.preview(sweep, base_plan, url, n_trials, timeout, epoch_budget, workers)
        if json_out:
            print_json(summary)
            return
        for part in preview.render(summary):
            console.print(part)
        for warning in summary["warnings"]:
            console.print(f"[yellow]warning:[/] {warning}")
        console.print("[dim]dry run: no storage opened, nothing written[/]")
        return
    from orchestrator.sweep.preview import space_as_planned

    for note in space_as_planned(sweep, base_plan)[1]:  # a dimension the target devices make inert
        console.print(f"[yellow]warning:[/] {note}")

    started = time.time()
    try:
        study = open_study(sweep, url, heartbeat=True)
    except StorageError as exc:  # errors go to stderr, whether or not --json owns stdout
        err.print(str(exc), style="red", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INCOMPLETE) from None
    record_sweep(study, sweep)
    queued = enqueue_initial(study, sweep)
    trials = study.get_trials(deepcopy=False)
    counts = state_counts(study, trials)
    done = done_count(counts)
    resumed = len(trials) - queued
    spent = epochs_spent(study, trials)
    console.print(f"study [bold]{sweep.study}[/] ({redact(url)}): "
                  + (f"resuming with {done} trial(s) done, " if resumed else "new, ")
                  + f"target {n_trials} complete+pruned; {workers} local worker(s)"
                  + (f", timeout {timeout:g} s" if timeout else "")
                  + (f", epoch budget {epoch_budget} ({spent} spent)" if epoch_budget else ""))

    codes: list[int] = []
    if done < n_trials and not (epoch_budget and spent >= epoch_budget):
        codes = _run_workers(sweep, url, study, n_trials, timeout, workers, console, epoch_budget)
    study = open_study(sweep, url, heartbeat=False, create=False)
    summary = report.write_report(study, sweep, url, n_trials, time.time() - started, epoch_budget)
    summary["worker_exit_codes"] = codes
    if json_out:
        print_json(summary)
    else:
        for part in report.render(summary):
            console.print(part)
        for note in summary.get("notes") or []:
            console.print(f"[dim]{note}[/]")
    if 130 in codes:
        raise typer.Exit(130)
    timed_out = timeout is not None and time.time() - started >= timeout
    if not summary["reached"] and not timed_out:
        console.print(f"[red]the study has {summary['done']} of {n_trials} trials; workers exited with {codes} "
                      f"(logs in {sweep.study_dir / 'workers'})[/]")
        raise typer.Exit(EXIT_INCOMPLETE)


def _run_workers(sweep, url: str, study, n_trials: int, timeout: float | None, workers: int, console,
                 epoch_budget: int | None = None) -> list[int]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator.launch import process
    from orchestrator.sweep.study import ENV_STORAGE

    log_dir = sweep.study_dir / "workers"
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, ENV_STORAGE: url, "YOLO_ORCH_SWEEP_CLI": str(os.getpid()), "PYTHONUNBUFFERED": "1"}
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    procs: list[subprocess.Popen] = []
    logs = []
    for i in range(workers):
        log_path = log_dir / f"{socket.gethostname()}-{os.getpid()}-w{i}.log"
        logs.append(log_path)
        cmd = [sys.executable, "-m", "orchestrator.sweep.trial_loop", str(sweep.path), "--study", sweep.study,
               "--n-trials", str(n_trials), "--index", str(i)]
        if timeout:
            cmd += ["--timeout", str(timeout)]
        if epoch_budget:
            cmd += ["--epoch-budget", str(epoch_budget)]
        with open(log_path, "ab", buffering=0) as log:
            # same process group as this command: Ctrl-C or a kill of the group reaches the workers;
            # each trial's training process has its own session and dies with its worker.
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=env))

    # the progress line shows the best value of a single-objective study (read once: it never changes)
    maximize = study.directions[0].name == "MAXIMIZE" if len(study.directions) == 1 else None

    with Progress(TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("trials", total=n_trials, info="")
        try:
            with process.interrupts_raise():
                while any(p.poll() is None for p in procs):
                    _refresh(progress, task, study, maximize)
                    time.sleep(2.0)
        except process.Interrupted:
            console.print("stopping the workers (their running trials end as FAIL)...")
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            deadline = time.time() + 60
            for p in procs:
                try:
                    p.wait(timeout=max(1.0, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            return [130 for _ in procs]
        _refresh(progress, task, study, maximize)
    codes = [p.returncode for p in procs]
    for code, log in zip(codes, logs):
        if code != 0:
            console.print(f"[red]worker exited with {code}[/]; last lines of {log}:")
            lines = log.read_text(errors="replace").splitlines()[-15:]
            console.print("\n".join(lines), markup=False, highlight=False)
    return codes


def _refresh(progress, task, study, maximize: bool | None) -> None:
    """One progress tick: a single storage read serves the tallies and the best value."""
    from orchestrator.sweep.study import done_count, epochs_spent, fail_stale, state_counts

    try:
        fail_stale(study)  # a dead worker's trial turns FAIL (and is retried) even while all others train
        trials = study.get_trials(deepcopy=False)
    except Exception:  # noqa: BLE001 - a busy database: try again next tick
        return
    c = state_counts(study, trials)
    info = (f"running {c['RUNNING']}  pruned {c['PRUNED']}  failed {c['FAIL']}  "
            f"epochs {epochs_spent(study, trials)}  {_best_text(trials, maximize)}")
    progress.update(task, completed=min(done_count(c), progress.tasks[0].total), info=info)


def _best_text(trials: list, maximize: bool | None) -> str:
    """`study.best_value` from already-fetched trials: the best COMPLETE value of a single objective."""
    values = [t.value for t in trials if t.state.name == "COMPLETE"] if maximize is not None else []
    if not values:
        return ""
    return f"best {(max if maximize else min)(values):.5g}"


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
