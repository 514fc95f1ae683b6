"""`yolo-orch resume RUN [--devices SPEC] [--json]`: continue a killed or failed run from its
weights/last.pt at the interrupted epoch, in the same run directory and registry row."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import check_devices_flag, human, print_json, run_exit_code
from orchestrator.cli.runs import RegistryOption, RunsDirOption, find_run, existing_registry


def resume_cmd(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one (see `yolo-orch runs`)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d", help="Continue on these devices; a different "
                                          "device count is re-planned through the scaler."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output on stdout."),
    runs_dir: Path = RunsDirOption,
    registry: Optional[Path] = RegistryOption,
) -> None:
    """Resume a killed or failed run at the epoch it reached (same resolved job and run directory)."""
    check_devices_flag(devices)
    with existing_registry(runs_dir, registry) as reg:
        reg.reconcile()  # resume changes state: a run that vanished is recorded killed before it is claimed
        row = find_run(reg, run)
    resume_and_report(row, devices, json_out)


def resume_and_report(row: dict, devices: str | None, json_out: bool, restart_ok: bool = False,
                      launch_opts: dict | None = None) -> None:
    """Resume the registry row's run with a progress bar, print its outcome, exit with its code
    (also `submit --run-id ID --resume-existing`, a requeued Slurm job: `restart_ok`, a run that
    stopped before its first checkpoint starts again)."""
    from orchestrator.runner import close_recorded_run, prepare_resume_row, resume_run
    from orchestrator.cli.render import show_failure, summary_table, training_progress

    closed = close_recorded_run(row)
    if closed is not None:
        if json_out:
            print_json({"run_id": row["id"], "run_dir": row["run_dir"], "state": closed.state, "exit_code": 0,
                        "summary": closed.summary, "note": closed.note})
        else:
            human(json_out).print(f"{row['job']}/{row['id']}: {closed.note}", markup=False, highlight=False)
        return
    info = prepare_resume_row(row, devices, restart_ok, launch_opts)
    console = human(json_out)
    plan = info["plan"]
    console.print(f"resuming [bold]{row['job']}/{row['id']}[/]: {info['note']} -> {row['run_dir']}")
    with training_progress(console, int(plan["train_args"]["epochs"]), info["from_epoch"] - 1) as on_event:
        outcome = resume_run(row, devices, on_event=on_event, prepared=info)
    if json_out:
        print_json({"run_id": row["id"], "run_dir": row["run_dir"], "state": outcome.state,
                    "exit_code": outcome.exit_code, "resumed_from_epoch": info["from_epoch"],
                    "devices": plan["devices"], "replanned": info["replanned"], "summary": outcome.summary,
                    "oom_recoveries": outcome.oom_recoveries, "note": outcome.note})
    else:
        console.print(summary_table(row["job"], row["id"], row["run_dir"], plan["devices"], outcome.summary,
                                    outcome.state))
    if outcome.state in ("failed", "stalled"):
        show_failure(console, outcome)
    raise typer.Exit(run_exit_code(outcome.state))


def register(app: typer.Typer) -> None:
    app.command("resume")(resume_cmd)
