"""XLA targets (`xla:cpu`, `tpu:N`): one launcher process; for several TPU cores the
XLA backend itself spawns one process per core (torch_xla.launch)."""

from __future__ import annotations

import sys
from pathlib import Path


def command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.worker.xla_entry", str(run_dir)]
