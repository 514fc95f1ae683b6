"""Small real checkpoints (torch.save, as Ultralytics writes them) for tests of what reads them."""

from __future__ import annotations

from pathlib import Path


def write_checkpoint(path: Path, epochs: int, resumable: bool = True) -> Path:
    """A checkpoint written after `epochs` epochs (Ultralytics' `epoch` is that minus one); without
    optimizer state and at epoch -1 when not `resumable` (a finished run's stripped one)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": epochs - 1 if resumable else -1, "model": torch.nn.Linear(4, 2),
                "optimizer": {"state": {}, "param_groups": []} if resumable else None,
                "train_args": {"epochs": 3}}, path)
    return path
