"""`yolo-orch submit JOB.yaml [--set K=V]... [--devices SPEC] [--dry-run] [--json]
[--node-rank K --rdzv-endpoint HOST:PORT [--rdzv-backend static|c10d] [--rdzv-id ID]]`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import check_devices_flag, human, print_json


def submit_cmd(
    job_file: Path = typer.Argument(..., help="Job spec YAML."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="Override a job field: KEY=VALUE (dotted keys)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d", help="Target devices (overrides target.devices)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved plan and write nothing."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output on stdout."),
    node_rank: Optional[int] = typer.Option(None, "--node-rank", help="Multi-node (MxN): this node's rank, 0..M-1."),
    rdzv_endpoint: Optional[str] = typer.Option(
        None, "--rdzv-endpoint", help="Multi-node: HOST:PORT of node 0, the same on every node."),
    rdzv_backend: str = typer.Option("static", "--rdzv-backend", help="Multi-node rendezvous: static or c10d."),
    rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="c10d rendezvous id (default: the job name)."),
) -> None:
    """Validate, plan and train a job."""
    from orchestrator.cli.render import scaling_table, train_args_table
    from orchestrator.plan import make_plan
    from orchestrator.spec.loader import load_job

    check_devices_flag(devices)
    job = load_job(job_file, sets=set_ or [], devices=devices)
    plan = make_plan(job)
    if plan.launcher == "torchrun" or node_rank is not None or rdzv_endpoint is not None:
        from orchestrator.launch.torchrun import launch_options  # docs/distributed.md

        plan.launch = launch_options(plan.devices, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id, require=not dry_run)
    console = human(json_out)
    if dry_run:
        from orchestrator.wandb_mode import describe_mode, resolve_mode

        if json_out:
            mode, why = resolve_mode(job.spec.wandb)
            print_json({**plan.as_json(), "wandb": {"mode": mode, "why": why}})
        else:
            console.print(scaling_table([plan.scaled], title=f"Plan for {job.spec.name}"))
            console.print(train_args_table(plan))
            console.print(describe_mode(job.spec.wandb), markup=False, highlight=False)
            console.print("[dim]dry run: nothing was written[/]")
        return

    from orchestrator.cli.render import show_failure, summary_table, training_progress
    from orchestrator.runner import create_run, execute

    run_id, run_dir = create_run(plan)
    console.print(f"run [bold]{job.spec.name}/{run_id}[/] on {plan.devices.text} -> {run_dir}")
    with training_progress(console, job.spec.epochs) as on_event:
        outcome = execute(plan, run_id, run_dir, on_event=on_event)

    if json_out:
        print_json({"run_id": run_id, "run_dir": str(run_dir), "state": outcome.state,
                    "exit_code": outcome.exit_code, "note": outcome.note, "summary": outcome.summary})
    else:
        console.print(summary_table(job.spec.name, run_id, run_dir, plan.devices.text, outcome.summary, outcome.state))
    if outcome.state == "killed":
        last = outcome.last_checkpoint
        console.print(f"stopped. last checkpoint: {last}" if last else "stopped before the first checkpoint.")
    elif outcome.state == "failed":
        show_failure(console, outcome)
    raise typer.Exit(0 if outcome.state == "finished" else (130 if outcome.state == "killed" else 1))


def register(app: typer.Typer) -> None:
    app.command("submit")(submit_cmd)
