"""`yolo-orch submit JOB.yaml [--set K=V]... [--devices SPEC] [--dry-run] [--json]
[--node-rank K --rdzv-endpoint HOST:PORT [--rdzv-backend static|c10d] [--rdzv-id ID]]
[--run-id ID [--resume-existing]] [--launcher slurm|ray [--ray-address HOST:PORT]]`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import JSON_OUT, SETS
from orchestrator.cli.common import check_devices_flag, human


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
    launcher: Optional[str] = typer.Option(None, "--launcher", help="Where attempts start (overrides target.launcher): "
                                           "slurm: each one an sbatch job, watched from here (the job's `slurm:`); "
                                           "ray: its nodes reserved on a Ray cluster (the job's `ray:`)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="With --launcher ray: the cluster's "
                                              "HOST:PORT (ray.address; default: RAY_ADDRESS)."),
) -> None:
    """Validate, plan and train a job."""
    from orchestrator.application import training
    from orchestrator.cli.running import progress_on, render_submitted
    from orchestrator.jobspec.loader import load_job
    from orchestrator.launch.torchrun import NodeLaunch

    check_devices_flag(devices)
    training.check_run_id(run_id, resume_existing)  # before the job's checks: one line for a wrong flag
    sets = [*(set_ or []), *([f"target.launcher={launcher}"] if launcher is not None else []),
            *([f"ray.address={ray_address}"] if ray_address is not None else [])]
    job = load_job(job_file, sets=sets, devices=devices)
    request = training.SubmitRequest(dry_run=dry_run, node=NodeLaunch(node_rank, rdzv_endpoint, rdzv_backend, rdzv_id),
                                     run_id=run_id, resume_existing=resume_existing, devices=devices)
    render_submitted(training.submit(job, request, progress_on(human(json_out))), job, json_out)


def register(app: typer.Typer) -> None:
    app.command("submit")(submit_cmd)
