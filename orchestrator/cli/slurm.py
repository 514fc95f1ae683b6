"""`yolo-orch slurm JOB.yaml [-d MxN] [--set K=V]... [--time T] [--partition P] ... > job.sbatch`
`yolo-orch slurm SWEEP.yaml --workers K [--storage URL] ... > sweep.sbatch` (a job array of sweep workers)"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import SETS
from orchestrator.cli.common import check_devices_flag
from orchestrator.errors import UserError


def slurm_cmd(
    job_file: Path = typer.Argument(..., help="Job spec YAML (a path every node can read)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d", help="Target devices, e.g. 2x4 (overrides target.devices)."),
    set_: Optional[list[str]] = SETS,
    time: str = typer.Option("24:00:00", "--time", help="#SBATCH --time."),
    partition: Optional[str] = typer.Option(None, "--partition", help="#SBATCH --partition."),
    account: Optional[str] = typer.Option(None, "--account", help="#SBATCH --account."),
    cpus_per_task: Optional[int] = typer.Option(None, "--cpus-per-task", help="#SBATCH --cpus-per-task (default 8 per GPU)."),
    port: int = typer.Option(29500, "--port", help="Rendezvous port on the first node (MASTER_PORT overrides)."),
    python: Optional[str] = typer.Option(None, "--python", help="Python on the nodes (default: this interpreter)."),
    sbatch: Optional[list[str]] = typer.Option(None, "--sbatch", help="Extra raw #SBATCH option, e.g. --sbatch=--qos=high."),
    requeue: bool = typer.Option(True, "--requeue/--no-requeue", help="Requeue before the time limit "
                                 "(and when preempted or requeued) and resume the same run."),
    warn_seconds: int = typer.Option(120, "--warn-seconds", min=10, help="How long before the time limit Slurm "
                                     "signals the job to requeue (#SBATCH --signal)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, max=1000,
                                          help="A sweep file: array tasks, one sweep worker each."),
    storage: Optional[str] = typer.Option(None, "--storage", help="A sweep file: the study's database URL, one "
                                          "every node reaches (default: the sweep file's)."),
) -> None:
    """Print a plain sbatch script that runs the job on Slurm, one torchrun per node; for a sweep
    file, a job array of sweep workers on one study."""
    from orchestrator.application import slurm
    from orchestrator.launch.slurm import SlurmOptions, option_problems

    check_devices_flag(devices)
    opts = SlurmOptions(time=time, partition=partition, account=account, cpus_per_task=cpus_per_task, port=port,
                        extra_sbatch=list(sbatch or []), requeue=requeue, warn_s=warn_seconds)
    if python:
        opts.python = python
    problems = option_problems(opts)
    if problems:
        raise UserError(problems)
    typer.echo(slurm.script_for(job_file, devices, set_ or [], opts, workers, storage), nl=False)


def register(app: typer.Typer) -> None:
    app.command("slurm")(slurm_cmd)
