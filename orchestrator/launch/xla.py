"""XLA targets (`xla:cpu`, `xla:cpu:N`, `tpu:N`): one process drives every XLA device (SPMD over
several), started through worker/xla_entry.py."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from orchestrator.devices import DeviceSpec

MIN_TORCH_XLA = (2, 8)  # the Kaggle TPU image's; SPMD and the APIs used here are the same in 2.8 and 2.9
# torch_xla opens the TPU in a child process, which lets it go when it exits; where there is no TPU
# it fails within seconds ("libtpu not found"). (The Kaggle runner has its own copy: it is standalone.)
TPU_PROBE = "import torch_xla.runtime as xr; print(xr.device_type(), xr.global_runtime_device_count())"
TPU_PROBE_S = 60


def command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.worker.xla_entry", str(run_dir)]


def unavailable(devices: DeviceSpec) -> str | None:
    """Why this machine cannot train on `devices`, or None: torch_xla missing or too old (read from
    its metadata without importing it), or, for `tpu:N`, fewer than N TPU cores (asked in a child)."""
    try:
        version = metadata.version("torch_xla")
    except metadata.PackageNotFoundError:
        return (f"'{devices.text}' trains with torch_xla, which is not installed here "
                "(`bash scripts/setup.sh test` installs it; a TPU VM has it)")
    parts = tuple(int(p) for p in version.split("+")[0].split(".")[:2] if p.isdigit())
    if parts < MIN_TORCH_XLA:
        return (f"'{devices.text}' needs torch_xla >= {'.'.join(map(str, MIN_TORCH_XLA))} (SPMD); "
                f"this machine has {version}")
    return tpu_shortfall(devices.text, devices.world_size) if devices.kind == "tpu" else None


@functools.lru_cache(maxsize=None)  # once per process: a sweep's trials ask again
def tpu_shortfall(text: str, cores: int) -> str | None:
    """Why this machine cannot give `cores` TPU cores (no TPU, one in use, fewer cores), or None."""
    try:
        proc = subprocess.run([sys.executable, "-c", TPU_PROBE], env={**os.environ, "PJRT_DEVICE": "TPU"},
                              capture_output=True, text=True, timeout=TPU_PROBE_S)
    except subprocess.TimeoutExpired:
        return f"'{text}' needs a TPU; torch_xla did not open one within {TPU_PROBE_S} s"
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) < 2 or words[-2] != "TPU":
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        found = lines[-1] if proc.returncode != 0 and lines else " ".join(words[-2:]) or "nothing"
        return f"'{text}' needs a TPU; torch_xla found none here ({found[:200]})"
    if int(words[-1]) < cores:
        return f"'{text}' plans {cores} TPU cores; this machine has {words[-1]}"
    return None
