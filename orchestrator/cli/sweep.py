"""`yolo-orch sweep SWEEP.yaml [--n-trials N] [--timeout S] [--epoch-budget E] [--storage URL]
[--study NAME] [--workers K] [--launcher ray [--ray-address HOST:PORT]] [--dry-run] [--json]`

Validates the sweep (exit 2 on bad input, nothing written), creates or resumes the study,
starts K worker processes (orchestrator/application/sweeps.py, sweep/trial_loop.py), here or each on a node of a Ray
cluster (`--launcher ray`), shows progress, then writes
the report (summary table, best.yaml, plots, dashboard command). Imports optuna, never torch
or ultralytics: training runs two processes down (worker -> training process). `--dry-run`
stops after validation and shows the plan (orchestrator/sweep/preview.py): no optuna either."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import err, human, print_json
from orchestrator.errors import EXIT_FAILED


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
    devices_per_trial: Optional[int] = typer.Option(None, "--devices-per-trial", help="Pin each worker to its own "
                                                    "N GPUs or CPU cores: G visible devices run G/N workers."),
    launcher: Optional[str] = typer.Option(None, "--launcher", help="ray: each worker on a node of a Ray cluster "
                                           "(its trials train there; the storage must reach every node: PostgreSQL)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="With --launcher ray: the cluster's "
                                              "HOST:PORT (default: RAY_ADDRESS)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate and show the search space as the trials' "
                                 "devices get it; opens no storage, writes nothing."),
    json_out: bool = typer.Option(False, "--json", help="Print a machine-readable summary on stdout."),
) -> None:
    """Hyperparameter sweep with Optuna: sampler, per-epoch pruning, crash-safe distributed workers."""
    from orchestrator.application import sweeps

    request = sweeps.prepare(sweep_file, study_name, storage, n_trials, timeout, epoch_budget, workers,
                             devices_per_trial, here=not dry_run, ray=_placement(launcher, ray_address, dry_run))
    console = human(json_out)
    for note in request.notes:
        console.print(f"[yellow]{note}[/]")
    if dry_run:
        _dry_run(request, console, json_out)
        return
    from orchestrator.sweep import report
    from orchestrator.sweep.preview import space_as_planned
    for note in space_as_planned(request.sweep, request.base_plan)[1]:  # a dimension the devices make inert
        console.print(f"[yellow]warning:[/] {note}")
    started = time.time()
    # a storage that cannot be used raises StorageError, an EnvError: one line on stderr, exit 1 (cli/app.py)
    study, status, remaining = sweeps.open_for_run(request)
    console.print(status)
    codes = _run_workers(request, study, console) if remaining else []
    summary = sweeps.final_report(request, started, lambda m: err.print(m, markup=False, highlight=False))
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
    timed_out = request.timeout is not None and time.time() - started >= request.timeout
    if not summary["reached"] and not timed_out:
        console.print(f"[red]the study has {summary['done']} of {request.n_trials} trials; workers exited with "
                      f"{codes} (logs in {request.sweep.study_dir / 'workers'})[/]")
        raise typer.Exit(EXIT_FAILED)


def _placement(launcher: str | None, ray_address: str | None, dry_run: bool) -> dict | None:
    """The Ray settings of workers placed there (`--launcher ray`), None for workers here."""
    from orchestrator.errors import UserError
    from orchestrator.jobspec.ray import RaySettings

    if launcher not in (None, "ray"):
        raise UserError(f"--launcher: a sweep's workers run here or on Ray ('ray'), not {launcher!r}; on Slurm: "
                        "`yolo-orch slurm SWEEP --workers K` (a job array)")
    if ray_address is not None and launcher is None:
        raise UserError("--ray-address: applies to --launcher ray")
    if launcher is None or dry_run:
        return None
    try:
        return RaySettings(address=ray_address).model_dump()
    except ValueError as exc:
        raise UserError(f"--ray-address: {ray_address!r} is not HOST:PORT") from exc


def _dry_run(request, console, json_out: bool) -> None:
    from orchestrator.sweep import preview

    summary = preview.preview(request.sweep, request.base_plan, request.url, request.n_trials, request.timeout,
                              request.epoch_budget, request.workers)
    if json_out:
        print_json(summary)
        return
    for part in preview.render(summary):
        console.print(part)
    for warning in summary["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}")
    console.print("[dim]dry run: no storage opened, nothing written[/]")


def _run_workers(request, study, console) -> list[int]:
    """The workers run (application/sweeps.run_workers) under a progress bar; their exit codes, and the last lines
    of each failed worker's log."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from orchestrator.application import sweeps

    with Progress(TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("trials", total=request.n_trials, info="")
        ended = sweeps.run_workers(
            request, study,
            on_progress=lambda done, info: progress.update(task, completed=min(done, request.n_trials), info=info),
            on_stopping=lambda: console.print("stopping the workers (their running trials end as FAIL)..."))
    for code, log, tail in ended.failed:
        console.print(f"[red]worker exited with {code}[/]; last lines of {log}:")
        console.print(tail, markup=False, highlight=False)
    return ended.codes


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep_cmd)
