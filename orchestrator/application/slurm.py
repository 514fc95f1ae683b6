"""What `yolo-orch slurm` does, without a terminal: an sbatch script for a job (one torchrun per node)
or for a sweep (a job array of sweep workers on one study), validated as `submit` and `sweep` validate
their files and, where Slurm is installed, by `sbatch --test-only`."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import UserError


def script_for(path: Path, devices: str | None, sets: list[str], opts, workers: int | None = None,
               storage: str | None = None) -> str:
    """The script for a job file, or for a sweep file (one with `space:`)."""
    from orchestrator.jobspec.yamlio import read_yaml_file

    raw = read_yaml_file(path, "job or sweep file")
    if isinstance(raw, dict) and "space" in raw:
        if devices or sets:
            raise UserError("--devices/--set: apply to a job file; a sweep's trials take its base job's")
        text = sweep_array(path, workers, storage, opts)
    else:
        if workers is not None or storage is not None:
            raise UserError("--workers/--storage: apply to a sweep file (one with `space:`)")
        text = job_script(path, devices, sets, opts)
    check_with_slurm(text)
    return text


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
    raise UserError(f"sbatch: Slurm rejects the script: {lines[-1] if lines else f'exit {proc.returncode}'}")


def job_script(job_file: Path, devices: str | None, sets: list[str], opts) -> str:
    from orchestrator.launch.slurm import sbatch_script
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job

    job = load_job(job_file, sets=sets, devices=devices)
    plan = make_plan(job)  # validates everything now, not on the cluster
    if plan.devices.kind not in ("cpu", "cuda"):
        raise UserError(f"target.devices: '{plan.devices.text}' does not run under Slurm/torchrun; use cpu, GPUs or MxN")
    return sbatch_script(job.spec.name, Path(job_file).resolve(), plan.devices, sets, opts)


def sweep_array(sweep_file: Path, workers: int | None, storage: str | None, opts) -> str:
    """Validated as `yolo-orch sweep` validates it, on a server every node reaches (server_storage)."""
    from orchestrator.launch.slurm import sweep_array_script

    request = server_storage(sweep_file, storage, "array tasks")
    sweep = request.sweep
    return sweep_array_script(sweep.study, Path(sweep_file).resolve(), workers or sweep.spec.workers, request.url,
                              request.base_plan.devices, opts)


def server_storage(sweep_file: Path, storage: str | None, who: str):
    """The sweep request (application.sweeps.prepare) for workers that run elsewhere (`who`: Slurm's array
    tasks, Kubernetes pods): its storage must be a server every one of them reaches, without a password in
    the script or manifest (libpq reads ~/.pgpass or PGPASSWORD where they run)."""
    from sqlalchemy.engine import make_url

    from orchestrator.urls import redact_url
    from orchestrator.application import sweeps

    request = sweeps.prepare(sweep_file, storage=storage, workers=1, here=False)  # the workers have the devices
    url = make_url(request.url)
    if url.get_backend_name() == "sqlite":
        raise UserError(f"--storage: {who} may run on other machines: the study needs a database server every one "
                        f"reaches (postgresql://user@host:5432/db), not {request.url}")
    if redact_url(request.url) != request.url:  # a password, ?password=, sslpassword=, a token...
        raise UserError(f"--storage: {redact_url(request.url)} holds a password or another secret, which the "
                        "script would carry in clear text; put it in ~/.pgpass or PGPASSWORD where the workers run "
                        "and leave it out of the URL")
    return request
