"""How a planned run is started: the one registry of launchers, each a backend of the runner.

The plan names the launcher for its device kind; the runner asks its backend (launch/backend.py) to start
an attempt from the run directory (its job.resolved.yaml), waits on it and stops it. A run placed on Slurm
(`target.launcher: slurm`) starts each attempt as an sbatch job of that same command
(`launch/slurm_backend.py`); one placed on Ray (`target.launcher: ray`) reserves its nodes on the cluster
and runs that command on each (`launch/ray_backend.py`). Kaggle's backend (`orchestrator/kaggle/backend.py`: a session an attempt) is
made by `kaggle launch` for its job; `yolo-orch slurm` (`launch/slurm.py`) prints a script around a whole
`yolo-orch submit` instead, whose runner is the one inside the allocation (MxN, sweeps as job arrays)."""

from __future__ import annotations

import shlex
from pathlib import Path

from orchestrator.devices import DeviceSpec, missing_gpus, parse_devices
from orchestrator.launch import local, ray_backend, slurm_backend, torchrun, xla
from orchestrator.launch.backend import Backend, ProcessBackend
from orchestrator.rundir import load_resolved

BACKENDS: dict[str, Backend] = {
    "local": ProcessBackend("local", local.command),  # one process: CPU or one GPU
    "torchrun": ProcessBackend("torchrun", torchrun.command),  # one per device (and node): DDP over gloo or NCCL
    "xla": ProcessBackend("xla", xla.command),  # the XLA backend: xla:cpu, tpu:N
}


def backend(launcher: str) -> Backend:
    return BACKENDS[launcher]


def backend_of_run(run_dir: Path) -> Backend:
    """The backend a run's attempts start on, from its job.resolved.yaml: its launcher on this machine, or
    that launcher's command placed on Slurm or Ray (a new backend per run: it counts the run's jobs, losses)."""
    resolved = load_resolved(run_dir)
    on_here = BACKENDS[resolved.plan.launcher]
    if resolved.job.placement == "ray":
        return ray_backend.RayBackend(resolved.job.ray)
    if resolved.job.placement != "slurm":
        return on_here
    several = parse_devices(resolved.plan.devices).nodes > 1
    node_line = torchrun.slurm_node_line if several else (lambda d: shlex.join(on_here.command(d)))
    return slurm_backend.SlurmBackend(resolved.job.slurm, node_line)


def unavailable(launcher: str, devices: DeviceSpec, placement: str | None = None,
                placed: dict | None = None) -> str | None:
    """Why `launcher` cannot start from this machine (a missing package, GPUs it does not have; Slurm's
    commands, or Ray and its cluster (`placed`: the job's `ray:`), for a run placed there, whose GPUs are the
    nodes'), or None: checked by `submit`, `train`, `sweep` and a re-planned `resume` before anything is written."""
    if placement == "slurm":
        return slurm_backend.unavailable()
    if placement == "ray":
        return ray_backend.unavailable(placed or {})
    return xla.unavailable(devices) if launcher == "xla" else missing_gpus(devices)
