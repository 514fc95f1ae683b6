"""How a planned run is started: the one registry of launchers.

A launcher turns a run directory (its job.resolved.yaml) into the command that starts the
training process; the plan names the launcher for its device kind, the runner looks the command
up here. Slurm (`launch/slurm.py`, an sbatch script around `yolo-orch submit`) and Kaggle
(`orchestrator/kaggle/`, a kernel pushed to Kaggle) wrap a whole submit instead of one process."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from orchestrator.devices import DeviceSpec, missing_gpus
from orchestrator.launch import local, torchrun, xla

COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "local": local.command,  # one process: CPU or one GPU
    "torchrun": torchrun.command,  # one process per device (and node): DDP over gloo or NCCL
    "xla": xla.command,  # the XLA backend: xla:cpu, tpu:N
}


def command(launcher: str, run_dir: Path) -> list[str]:
    return COMMANDS[launcher](run_dir)


def unavailable(launcher: str, devices: DeviceSpec) -> str | None:
    """Why `launcher` cannot start on this machine (a missing package, GPUs it does not have), or
    None: checked by `submit`, `train`, `sweep` and a re-planned `resume` before anything is written."""
    return xla.unavailable(devices) if launcher == "xla" else missing_gpus(devices)
