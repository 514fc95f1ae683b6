"""`yolo-orch slurm JOB.yaml [-d MxN] [--set K=V]... [--time T] [--partition P] ... > job.sbatch`
`yolo-orch slurm SWEEP.yaml --workers K [--storage URL] ... > sweep.sbatch` (a job array of sweep workers)"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import SETS
from orchestrator.cli.common import check_devices_flag
from orchestrator.jobspec.errors import SpecError


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
    from orchestrator.launch.slurm import SlurmOptions, option_problems
    from orchestrator.jobspec.yamlio import read_yaml_file

    check_devices_flag(devices)
    opts = SlurmOptions(time=time, partition=partition, account=account, cpus_per_task=cpus_per_task, port=port,
                        extra_sbatch=list(sbatch or []), requeue=requeue, warn_s=warn_seconds)
    if python:
        opts.python = python
    problems = option_problems(opts)
    if problems:
        raise SpecError(problems)
    raw = read_yaml_file(job_file, "job or sweep file")
    if isinstance(raw, dict) and "space" in raw:
        if devices or set_:
            raise SpecError("--devices/--set: apply to a job file; a sweep's trials take its base job's")
        text = sweep_array(job_file, workers, storage, opts)
    else:
        if workers is not None or storage is not None:
            raise SpecError("--workers/--storage: apply to a sweep file (one with `space:`)")
        text = job_script(job_file, devices, set_ or [], opts)
    check_with_slurm(text)
    typer.echo(text, nl=False)


UNREACHABLE = ("configuration source", "Unable to contact", "Connection refused", "Zero Bytes were transmitted")


def check_with_slurm(text: str) -> None:
    """Where Slurm is installed, `sbatch --test-only` validates the script without submitting it: an
    option Slurm rejects (a bad --time, a partition that does not exist) is its own message, exit 2.
    No sbatch, or no controller to ask (a laptop): the script is printed unchecked."""
    import shutil
    import subprocess

    if shutil.which("sbatch") is None:
        return
    try:
        proc = subprocess.run(["sbatch", "--test-only"], input=text, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return
    lines = [ln.strip().removeprefix("sbatch: error: ") for ln in proc.stderr.splitlines() if ln.strip()]
    if proc.returncode == 0 or any(marker in proc.stderr for marker in UNREACHABLE):
        return
    raise SpecError(f"sbatch: Slurm rejects the script: {lines[-1] if lines else f'exit {proc.returncode}'}")


def job_script(job_file: Path, devices: str | None, sets: list[str], opts) -> str:
    from orchestrator.launch.slurm import sbatch_script
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job

    job = load_job(job_file, sets=sets, devices=devices)
    plan = make_plan(job)  # validates everything now, not on the cluster
    if plan.devices.kind not in ("cpu", "cuda"):
        raise SpecError(f"target.devices: '{plan.devices.text}' does not run under Slurm/torchrun; use cpu, GPUs or MxN")
    return sbatch_script(job.spec.name, Path(job_file).resolve(), plan.devices, sets, opts)


def sweep_array(sweep_file: Path, workers: int | None, storage: str | None, opts) -> str:
    """Validated as `yolo-orch sweep` validates it; the storage must be a server every node reaches,
    without a password in the script (libpq reads ~/.pgpass or PGPASSWORD on the nodes)."""
    from sqlalchemy.engine import make_url

    from orchestrator.launch.slurm import sweep_array_script
    from orchestrator.urls import redact_url
    from orchestrator.sweep import driver

    request = driver.prepare(sweep_file, storage=storage, workers=1, here=False)  # the nodes have the devices
    url = make_url(request.url)
    if url.get_backend_name() == "sqlite":
        raise SpecError(f"--storage: array tasks may run on other nodes: the study needs a database server every "
                        f"node reaches (postgresql://user@host:5432/db), not {request.url}")
    if redact_url(request.url) != request.url:  # a password, ?password=, sslpassword=, a token...
        raise SpecError(f"--storage: {redact_url(request.url)} holds a password or another secret, which the "
                        "script would carry in clear text; put it in ~/.pgpass or PGPASSWORD on the nodes and leave "
                        "it out of the URL")
    sweep = request.sweep
    return sweep_array_script(sweep.study, Path(sweep_file).resolve(), workers or sweep.spec.workers, request.url,
                              request.base_plan.devices, opts)


def register(app: typer.Typer) -> None:
    app.command("slurm")(slurm_cmd)
