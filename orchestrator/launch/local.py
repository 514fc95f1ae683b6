"""One training process on this machine: CPU or one GPU."""

from __future__ import annotations

import sys
from pathlib import Path


def command(run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "orchestrator.worker.train", str(run_dir)]
