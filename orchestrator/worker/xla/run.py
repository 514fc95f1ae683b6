"""Run the XLA backend: ``train_xla(args, run_dir, ...)`` in this process, on one XLA device or on
several with SPMD (every TPU core of the VM, or N virtual XLA:CPU devices); a run directory's
training process is worker/xla_entry.py. One process drives every device: torch_xla's
multi-process path (one process per core, ``torch_xla.launch``) is not used: on these machines its
rendezvous hangs on XLA:CPU, so it could never be tested, while SPMD runs here for real."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from orchestrator.rundir import LAST, write_text_atomic

from .metrics import trainer_result
from .trainer import XLADetectionTrainer

RESULT_FILE = "xla_result.json"


def configure_xla_env() -> None:
    """Environment the backend wants before torch_xla initializes (no-op for keys already set).

    ``XLA_NO_SPECIAL_SCALARS=1``: by default torch_xla bakes the Python scalars 0 and 1 into the
    graph as constants and passes all others as device data, so a learning rate that is exactly
    0.0 (the first warmup step) or 1.0 would trace a different graph and compile again. With the
    flag every Python scalar is device data and lr/momentum/EMA-decay changes never recompile.
    """
    os.environ.setdefault("XLA_NO_SPECIAL_SCALARS", "1")


def xla_available() -> tuple[bool, str]:
    """(True, '') if torch_xla imports, else (False, reason)."""
    try:
        import torch_xla  # noqa: F401
        import torch_xla.core.xla_model  # noqa: F401
    except Exception as e:  # ImportError, or a broken install (e.g. torch version mismatch)
        return False, f"torch_xla not importable: {type(e).__name__}: {e}"
    return True, ""


def _overrides(args: dict, run_dir: Path, resume: bool | Path) -> dict:
    o = dict(args)
    for k in ("device", "project", "name", "save_dir", "exist_ok", "resume", "mode"):
        o.pop(k, None)
    o.update(device="cpu", save_dir=str(run_dir), exist_ok=True, mode="train", task="detect")
    if resume:
        last = run_dir / LAST if resume is True else Path(resume)
        if not last.exists():
            raise FileNotFoundError(f"resume: {last} does not exist")
        o["resume"] = str(last)
    return o


def _no_jax_nag(record: logging.LogRecord) -> bool:
    """torch_xla 2.8's mark_sharding looks for JAX on every call and, where it is missing, logs "You
    are trying to use a feature that requires jax/pallas" each time (hundreds of lines an epoch);
    plain SPMD sharding does not need JAX."""
    return "requires jax/pallas" not in record.getMessage()


def start_runtime(devices: int, compile_cache: Path | None = None) -> None:
    """Before any XLA computation in this process: the persistent compilation cache (compiled graphs
    written there are read back by a later process: a resumed Kaggle session) and, for several
    devices, SPMD (one process drives them all). Raises RuntimeError when fewer devices exist."""
    import torch_xla.runtime as xr

    logging.getLogger().addFilter(_no_jax_nag)
    if compile_cache:
        xr.initialize_cache(str(compile_cache), readonly=False)
    if devices > 1:
        xr.use_spmd()
    found = xr.global_runtime_device_count()
    if found < devices:
        raise RuntimeError(f"{devices} XLA devices planned, {found} found ({xr.device_type()})")


def train_xla(
    args: dict,
    run_dir: Path,
    *,
    world_size: int = 1,
    max_boxes: int = 32,
    bf16: bool = False,
    callbacks: dict[str, list] | None = None,
    resume: bool | Path = False,
    compile_cache: Path | None = None,
) -> dict:
    """Train an Ultralytics detection model on XLA devices in this process; return the final metrics.

    Args:
        args: Ultralytics train arguments (model, data, epochs, imgsz, batch = TOTAL over all
            devices, nbs, lr0, lrf, momentum, weight_decay, warmup_*, optimizer, cos_lr, seed, box,
            cls, dfl, augmentation keys, workers, ...). ``device``/``project``/``name`` are ignored.
        run_dir: the run folder: results.csv, args.yaml, weights/{last,best}.pt, xla_result.json.
        world_size: XLA devices (TPU cores, or virtual XLA:CPU devices: CPU_NUM_DEVICES). Several
            train with SPMD: the global batch sharded over a mesh of them, one process.
        max_boxes: boxes kept per image (fixed padding); images with more keep the first N.
        bf16: bf16 autocast for forward and loss.
        callbacks: {event: [fn(trainer)]}, Ultralytics events; ``on_fit_epoch_end`` sees
            ``.epoch``, ``.metrics``, ``.fitness`` and may set ``.stop = True``.
        resume: continue ``run_dir/weights/last.pt`` (True) or this checkpoint at its epoch + 1
            (optimizer, EMA restored).
        compile_cache: torch_xla's persistent compilation cache folder (TPU; XLA:CPU writes it but
            cannot read it back: "Deserializing serialized executable not supported").

    Returns:
        The metrics of the final validation of best.pt (metrics/precision(B), metrics/recall(B),
        metrics/mAP50(B), metrics/mAP50-95(B)), ``fitness``, and ``xla/*`` compile statistics.
    """
    configure_xla_env()
    ok, why = xla_available()
    if not ok:
        raise RuntimeError(why)
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    start_runtime(int(world_size), compile_cache)
    trainer = XLADetectionTrainer(_overrides(dict(args), run_dir, resume), world_size=int(world_size),
                                  max_boxes=int(max_boxes), bf16=bool(bf16), callbacks=callbacks)
    trainer.train()
    result = trainer_result(trainer)
    write_text_atomic(run_dir / RESULT_FILE, json.dumps(result, indent=2, default=str))
    return result
