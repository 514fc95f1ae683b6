"""Run the XLA backend: ``train_xla(args, run_dir, ...)`` in this process (one device) or one process
per TPU core (``torch_xla.launch``), and its command line ``python -m orchestrator.worker.xla.run``.
torch_xla is imported only when a training starts."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from orchestrator.rundir import LAST

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


def _overrides(args: dict, run_dir: Path, resume: bool) -> dict:
    o = dict(args)
    for k in ("device", "project", "name", "save_dir", "exist_ok", "resume", "mode"):
        o.pop(k, None)
    o.update(device="cpu", save_dir=str(run_dir), exist_ok=True, mode="train", task="detect")
    if resume:
        last = run_dir / LAST
        if not last.exists():
            raise FileNotFoundError(f"resume=True but {last} does not exist")
        o["resume"] = str(last)
    return o


def _run_process(index: int, payload: dict) -> dict | None:
    """Body of one training process (index = core ordinal)."""
    import torch_xla.runtime as xr

    if payload.get("compile_cache"):
        # before any XLA computation in this process; compiled graphs are written there and read
        # back by a later process (a resumed Kaggle session) instead of compiled again
        xr.initialize_cache(payload["compile_cache"], readonly=False)
    world, rank = payload["world_size"], index
    if world > 1:
        world, rank = xr.world_size(), xr.global_ordinal()
    run_dir = Path(payload["run_dir"])
    trainer = XLADetectionTrainer(
        _overrides(payload["args"], run_dir, payload["resume"]),
        world_size=world,
        rank=rank,
        max_boxes=payload["max_boxes"],
        bf16=payload["bf16"],
        callbacks=payload.get("callbacks"),
    )
    trainer.train()
    if rank != 0:
        return None
    result = trainer_result(trainer)
    (run_dir / RESULT_FILE).write_text(json.dumps(result, indent=2, default=str))
    return result


def _mp_entry(index: int, payload: dict) -> None:  # pragma: no cover - multi-process, untested here
    _run_process(index, payload)


def train_xla(
    args: dict,
    run_dir: Path,
    *,
    world_size: int = 1,
    max_boxes: int = 32,
    bf16: bool = False,
    callbacks: dict[str, list] | None = None,
    resume: bool = False,
    compile_cache: Path | None = None,
) -> dict:
    """Train an Ultralytics detection model on XLA devices; return the final metrics dict.

    Args:
        args: Ultralytics train arguments (model, data, epochs, imgsz, batch = TOTAL over all cores,
            nbs, lr0, lrf, momentum, weight_decay, warmup_*, optimizer, cos_lr, seed, box, cls,
            dfl, augmentation keys, workers, ...). ``device``/``project``/``name`` are ignored.
        run_dir: the run folder: results.csv, args.yaml, weights/{last,best}.pt, xla_result.json.
        world_size: processes (cores). 1 runs in this process; >1 uses ``torch_xla.launch`` on all
            local devices (the TPU cores) - untested on these CPU machines.
        max_boxes: boxes kept per image (fixed padding); images with more keep the first N.
        bf16: bf16 autocast for forward and loss.
        callbacks: {event: [fn(trainer)]}, Ultralytics events; ``on_fit_epoch_end`` sees
            ``.epoch``, ``.metrics``, ``.fitness`` and may set ``.stop = True``. With
            ``world_size > 1`` they must be picklable (they run in the master process).
        resume: continue ``run_dir/weights/last.pt`` at its epoch + 1 (optimizer, EMA restored).
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
    payload = {
        "args": dict(args),
        "run_dir": str(run_dir),
        "world_size": int(world_size),
        "max_boxes": int(max_boxes),
        "bf16": bool(bf16),
        "callbacks": callbacks,
        "resume": bool(resume),
        "compile_cache": str(compile_cache) if compile_cache else None,
    }
    if world_size <= 1:
        return _run_process(0, payload)
    # UNTESTED here: multi-process XLA on CPU hangs on these machines. One process per local
    # device (all TPU cores); the master writes the result file that is returned.
    import torch_xla

    (run_dir / RESULT_FILE).unlink(missing_ok=True)
    torch_xla.launch(_mp_entry, args=(payload,))
    return json.loads((run_dir / RESULT_FILE).read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.worker.xla.run", description="Train an Ultralytics detector on XLA (TPU)."
    )
    p.add_argument("--args-json", required=True, type=Path, help="JSON file with the Ultralytics train args")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--world-size", type=int, default=1, help="processes (cores); 1 = this process")
    p.add_argument("--max-boxes", type=int, default=32)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--resume", action="store_true")
    ns = p.parse_args(argv)
    args = json.loads(ns.args_json.read_text())
    result = train_xla(
        args, ns.run_dir, world_size=ns.world_size, max_boxes=ns.max_boxes, bf16=ns.bf16, resume=ns.resume
    )
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
