"""Ultralytics-format checkpoints (last.pt / best.pt) from an XLA training run.

The dict has exactly the keys ``BaseTrainer.save_model`` writes (epoch, best_fitness, stopper,
model=None, ema (fp16, CPU), updates, modelopt, optimizer (state on CPU, fp16 where Ultralytics
converts), scaler, train_args, train_metrics, train_results, date, version, git, license, docs)
plus one extra key ``xla`` (backend settings and compile stats; Ultralytics ignores unknown keys).
So ``ultralytics.YOLO(path)`` loads it on CPU, Ultralytics' own resume can read it, and so can
``train_xla(..., resume=True)``. At the end of training the files are stripped with Ultralytics'
``strip_optimizer`` (model = EMA in fp16, no optimizer), as ``BaseTrainer.final_eval`` does.

Everything is moved to the host before pickling: device (XLA) tensors are never serialized.
"""

from __future__ import annotations

import io
from copy import deepcopy
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import nn

from orchestrator.rundir import write_bytes_atomic

__all__ = ["to_cpu", "optimizer_state_to_cpu", "build_checkpoint", "write_checkpoints"]


def to_cpu(obj: Any) -> Any:
    """Nested containers with every tensor copied to the CPU (non-tensors passed through)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu() if obj.device.type != "cpu" else obj.detach().clone()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(to_cpu(v) for v in obj)
    return obj


def optimizer_state_to_cpu(optimizer: torch.optim.Optimizer) -> dict:
    """``optimizer.state_dict()`` with its state tensors on the CPU, fp16 where Ultralytics converts."""
    from ultralytics.utils.torch_utils import convert_optimizer_state_dict_to_fp16

    return convert_optimizer_state_dict_to_fp16(to_cpu(optimizer.state_dict()))


def build_checkpoint(
    *,
    epoch: int,
    best_fitness: float | None,
    stopper,
    ema_cpu: nn.Module,
    updates: int,
    optimizer_state: dict | None,
    train_args: dict,
    train_metrics: dict,
    train_results: dict,
    model_cpu_state: dict | None = None,
    extra: dict | None = None,
) -> bytes:
    """Serialize a checkpoint dict the way ``BaseTrainer.save_model`` does; returns the bytes."""
    from ultralytics import __version__
    from ultralytics.utils import GIT

    ema = ema_cpu
    sd = ema.state_dict()
    if model_cpu_state is not None and not all(
        torch.isfinite(v).all() for v in sd.values() if isinstance(v, torch.Tensor) and v.is_floating_point()
    ):
        # as Ultralytics: resync a NaN/Inf-poisoned EMA tensor from the live model where that is finite
        for k, v in sd.items():
            if isinstance(v, torch.Tensor) and not torch.isfinite(v).all() and torch.isfinite(model_cpu_state[k]).all():
                v.copy_(model_cpu_state[k])
    ema = deepcopy(ema).half().to(memory_format=torch.contiguous_format)
    if hasattr(ema, "criterion"):
        ema.criterion = None
    for v in ema.state_dict().values():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            torch.nan_to_num_(v)

    buffer = io.BytesIO()
    torch.save(
        {
            "epoch": epoch,
            "best_fitness": best_fitness,
            "stopper": {"best_fitness": stopper.best_fitness, "best_epoch": stopper.best_epoch},
            "model": None,  # resume and final checkpoints derive from EMA (as Ultralytics)
            "ema": ema,
            "updates": updates,
            "modelopt": None,  # no QAT on the XLA backend
            "optimizer": optimizer_state,
            "scaler": {},  # no GradScaler: bf16 autocast needs none
            "train_args": train_args,
            "train_metrics": train_metrics,
            "train_results": train_results,
            "date": datetime.now().astimezone().isoformat(),
            "version": __version__,
            "git": {
                "root": str(GIT.root),
                "branch": GIT.branch,
                "commit": GIT.commit,
                "message": GIT.message,
                "origin": GIT.origin,
            },
            "license": "AGPL-3.0 (https://ultralytics.com/license)",
            "docs": "https://docs.ultralytics.com",
            "xla": extra or {},
        },
        buffer,
    )
    return buffer.getvalue()


def write_checkpoints(
    data: bytes, wdir: Path, *, is_best: bool, epoch: int, save_period: int = -1
) -> tuple[Path, Path]:
    """Write last.pt (always), best.pt (if best) and epoch{N}.pt (save_period), atomically each."""
    wdir = Path(wdir)
    wdir.mkdir(parents=True, exist_ok=True)
    last, best = wdir / "last.pt", wdir / "best.pt"
    targets = [last]
    if is_best:
        targets.append(best)
    if save_period > 0 and epoch % save_period == 0:
        targets.append(wdir / f"epoch{epoch}.pt")
    for path in targets:
        write_bytes_atomic(path, data, fsync=True)  # as the CUDA/CPU worker's checkpoints (worker/recovery.py)
    return last, best


def save_trainer_checkpoint(trainer, extra: dict) -> None:
    """BaseTrainer.save_model for the XLA trainer: last.pt (and best.pt, epoch copies) from the
    host EMA copy and a host copy of the optimizer state."""
    data = build_checkpoint(
        epoch=trainer.epoch,
        best_fitness=trainer.best_fitness,
        stopper=trainer.stopper,
        ema_cpu=trainer.cpu_ema,
        updates=trainer.ema.updates,
        optimizer_state=optimizer_state_to_cpu(trainer.optimizer),
        train_args=vars(trainer.args),
        train_metrics={**trainer.metrics, "fitness": trainer.fitness},
        train_results=trainer.read_results_csv(),
        extra=extra,
    )
    write_checkpoints(data, trainer.wdir, is_best=trainer.best_fitness == trainer.fitness, epoch=trainer.epoch,
                      save_period=trainer.save_period)


def refresh_host_copy(cpu_ema: nn.Module, device_ema: nn.Module, model: nn.Module, ema_attrs: list[str]) -> nn.Module:
    """Copy the device EMA's weights (and the model's attributes) into the host model that
    validation and checkpoints read."""
    import torch_xla
    from ultralytics.utils.torch_utils import copy_attr

    torch_xla.sync()
    cpu_ema.load_state_dict(to_cpu(device_ema.state_dict()))
    copy_attr(cpu_ema, model, include=[a for a in ema_attrs if a not in ("stride", "class_weights")])
    cw = getattr(model, "class_weights", None)
    if cw is not None:
        cpu_ema.class_weights = cw.detach().cpu()
    cpu_ema.criterion = None  # rebuilt on the host by the validator for val losses
    return cpu_ema
