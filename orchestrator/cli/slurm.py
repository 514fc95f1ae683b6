"""`yolo-orch slurm JOB.yaml [-d MxN] [--set K=V]... [--time T] [--partition P] ... > job.sbatch`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import check_devices_flag

from orchestrator.spec.errors import SpecError


def slurm_cmd(
    job_file: Path = typer.Argument(..., help="Job spec YAML (a path every node can read)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d", help="Target devices, e.g. 2x4 (overrides target.devices)."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="Override a job field: KEY=VALUE (dotted keys)."),
    time: str = typer.Option("24:00:00", "--time", help="#SBATCH --time."),
    partition: Optional[str] = typer.Option(None, "--partition", help="#SBATCH --partition."),
    account: Optional[str] = typer.Option(None, "--account", help="#SBATCH --account."),
    cpus_per_task: Optional[int] = typer.Option(None, "--cpus-per-task", help="#SBATCH --cpus-per-task (default 8 per GPU)."),
    port: int = typer.Option(29500, "--port", help="Rendezvous port on the first node (MASTER_PORT overrides)."),
    python: Optional[str] = typer.Option(None, "--python", help="Python on the nodes (default: this interpreter)."),
    sbatch: Optional[list[str]] = typer.Option(None, "--sbatch", help="Extra raw #SBATCH option, e.g. --sbatch=--qos=high."),
    requeue: bool = typer.Option(True, "--requeue/--no-requeue", help="Single node: requeue before the time limit "
                                 "(and when preempted or requeued) and resume the same run."),
    warn_seconds: int = typer.Option(120, "--warn-seconds", min=10, help="How long before the time limit Slurm "
                                     "signals the job to requeue (#SBATCH --signal)."),
) -> None:
    """Print a plain sbatch script that runs the job on Slurm, one torchrun per node."""
    from orchestrator.launch.slurm import SlurmOptions, sbatch_script
    from orchestrator.plan import make_plan
    from orchestrator.spec.loader import load_job

    check_devices_flag(devices)
    job = load_job(job_file, sets=set_ or [], devices=devices)
    plan = make_plan(job)  # validates everything now, not on the cluster
    if plan.devices.kind not in ("cpu", "cuda"):
        raise SpecError(f"target.devices: '{plan.devices.text}' does not run under Slurm/torchrun; use cpu, GPUs or MxN")
    opts = SlurmOptions(time=time, partition=partition, account=account, cpus_per_task=cpus_per_task, port=port,
                        extra_sbatch=list(sbatch or []), requeue=requeue, warn_s=warn_seconds)
    if python:
        opts.python = python
    text = sbatch_script(job.spec.name, Path(job_file).resolve(), plan.devices, set_ or [], opts)
    typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.command("slurm")(slurm_cmd)
