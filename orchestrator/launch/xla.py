"""XLA targets (`xla:cpu`, `xla:cpu:N`, `tpu:N`): one process drives every XLA device (SPMD over
several), started through worker/xla_entry.py."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from orchestrator.devices import DeviceSpec

MIN_TORCH_XLA = (2, 8)  # the Kaggle TPU image's; SPMD and the APIs used here are the same in 2.8 and 2.9


def command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.worker.xla_entry", str(run_dir)]


def unavailable(devices: DeviceSpec) -> str | None:
    """Why this machine cannot train on `devices` (torch_xla missing or too old), read from the
    installed package's metadata without importing it; None when it can."""
    try:
        version = metadata.version("torch_xla")
    except metadata.PackageNotFoundError:
        return (f"'{devices.text}' trains with torch_xla, which is not installed here "
                "(`bash scripts/setup.sh test` installs it; a TPU VM has it)")
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < MIN_TORCH_XLA:
        return (f"'{devices.text}' needs torch_xla >= {'.'.join(map(str, MIN_TORCH_XLA))} (SPMD); "
                f"this machine has {version}")
    return None
