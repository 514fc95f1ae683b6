"""How a planned run is started: the one registry of launchers, each a backend of the runner.

The plan names the launcher for its device kind; the runner asks its backend (launch/backend.py) to start
an attempt from the run directory (its job.resolved.yaml), waits on it and stops it. Kaggle's backend
(`orchestrator/kaggle/backend.py`: a session an attempt) is made by `kaggle launch` for its job; Slurm
(`launch/slurm.py`, an sbatch script around `yolo-orch submit`) wraps a whole submit, whose runner is the one
inside the allocation."""

from __future__ import annotations

from orchestrator.devices import DeviceSpec, missing_gpus
from orchestrator.launch import local, torchrun, xla
from orchestrator.launch.backend import Backend, ProcessBackend

BACKENDS: dict[str, Backend] = {
    "local": ProcessBackend("local", local.command),  # one process: CPU or one GPU
    "torchrun": ProcessBackend("torchrun", torchrun.command),  # one per device (and node): DDP over gloo or NCCL
    "xla": ProcessBackend("xla", xla.command),  # the XLA backend: xla:cpu, tpu:N
}


def backend(launcher: str) -> Backend:
    return BACKENDS[launcher]


def unavailable(launcher: str, devices: DeviceSpec) -> str | None:
    """Why `launcher` cannot start on this machine (a missing package, GPUs it does not have), or
    None: checked by `submit`, `train`, `sweep` and a re-planned `resume` before anything is written."""
    return xla.unavailable(devices) if launcher == "xla" else missing_gpus(devices)
