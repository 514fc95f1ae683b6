"""`yolo-orch submit JOB.yaml [--set K=V]... [--devices SPEC] [--dry-run] [--json]
[--node-rank K --rdzv-endpoint HOST:PORT [--rdzv-backend static|c10d] [--rdzv-id ID]]
[--run-id ID [--resume-existing]]`"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import JSON_OUT, SETS
from orchestrator.cli.common import check_devices_flag
from orchestrator.cli.running import continue_existing, plan_and_run
from orchestrator.jobspec.errors import SpecError


def submit_cmd(
    job_file: Path = typer.Argument(..., help="Job spec YAML."),
    set_: Optional[list[str]] = SETS,
    devices: Optional[str] = typer.Option(None, "--devices", "-d", help="Target devices (overrides target.devices)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved plan and write nothing."),
    json_out: bool = JSON_OUT,
    node_rank: Optional[int] = typer.Option(None, "--node-rank", help="Multi-node (MxN): this node's rank, 0..M-1."),
    rdzv_endpoint: Optional[str] = typer.Option(
        None, "--rdzv-endpoint", help="Multi-node: HOST:PORT of node 0, the same on every node."),
    rdzv_backend: str = typer.Option("static", "--rdzv-backend", help="Multi-node rendezvous: static or c10d."),
    rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="c10d rendezvous id (default: the job name)."),
    run_id: Optional[str] = typer.Option(None, "--run-id", help="The run's id (default: a new one); it must be new."),
    resume_existing: bool = typer.Option(False, "--resume-existing", help="With --run-id: when that run exists, "
                                         "resume it instead (a requeued Slurm job; a finished one: nothing to do)."),
) -> None:
    """Validate, plan and train a job."""
    from orchestrator.jobspec.loader import load_job

    check_devices_flag(devices)
    check_run_id(run_id, resume_existing)
    job = load_job(job_file, sets=set_ or [], devices=devices)
    if run_id and node_rank is not None:  # one run per node; node 0's holds the weights
        run_id = f"{run_id}-node{node_rank}"
    if run_id and not dry_run:
        existing = existing_run(job.spec.runs_dir, run_id, resume_existing, job.spec.name)
        if existing is not None:
            return continue_existing(existing, devices, json_out,
                                     node_launch(job, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id))
    plan_and_run(job, dry_run, json_out, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id, run_id)


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_run_id(run_id: str | None, resume_existing: bool) -> None:
    if resume_existing and not run_id:
        raise SpecError("--resume-existing: needs --run-id (the run to resume when it exists)")
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        raise SpecError(f"--run-id: '{run_id}' is not a run id (letters, digits, '.', '_', '-'; at most 100)")


def existing_run(runs_dir: Path, run_id: str, resume_existing: bool, job_name: str) -> dict | None:
    """The registry row of `run_id`, or None when there is none; a row without --resume-existing, or
    of another job, is an error."""
    from orchestrator.registry import Registry, registry_path

    if not registry_path(runs_dir).is_file():
        return None
    with Registry.open(runs_dir) as reg:
        reg.reconcile()  # a requeued job's run vanished with its node: recorded before it is claimed
        row = reg.get(run_id)
    if row is not None and row["job"] != job_name:
        raise SpecError(f"--run-id: run {run_id} is a run of job '{row['job']}', not '{job_name}'; pick another id")
    if row is not None and not resume_existing:
        then = ("pick another id" if row["state"] == "finished" else
                f"it is still going: `yolo-orch logs {run_id} --follow` shows it" if row["state"] in ("queued", "running")
                else f"`yolo-orch resume {run_id}` continues it")
        raise SpecError(f"--run-id: run {run_id} exists ({row['state']}); {then}")
    return row


def node_launch(job, node_rank: int | None, rdzv_endpoint: str | None, rdzv_backend: str,
                rdzv_id: str | None) -> dict | None:
    """This node's rank and rendezvous for a resumed multi-node run (a new allocation: a new node 0)."""
    if node_rank is None and rdzv_endpoint is None:
        return None
    from orchestrator.launch.torchrun import launch_options

    return launch_options(job.spec.target.devices, node_rank, rdzv_endpoint, rdzv_backend, rdzv_id)


def register(app: typer.Typer) -> None:
    app.command("submit")(submit_cmd)
