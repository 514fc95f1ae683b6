"""What Ultralytics really applies for a set of train arguments on N devices (its formulas, from
ultralytics_math), and the number formatting every reason line uses."""

from __future__ import annotations

import math
from typing import Any

from orchestrator.devices import XLA_KINDS  # trained by orchestrator/worker/xla with its own fixed-batch loader
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.releases import Formulas


def fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def clean(x: float) -> float:
    """Drop float noise from a computed value (0.04000000000000001 -> 0.04): the 12-digit form, but only
    when it is within a few ulps, so a value like 2/3000 keeps its full precision."""
    c = float(f"{x:.12g}")
    return c if abs(c - x) <= 4 * math.ulp(x) else x


def effective_values(
    passed: dict[str, Any],
    world_size: int,
    epochs: int,
    dataset_size: int | None = None,
    kind: str = "cuda",
    drop_last: bool = False,
    formulas: Formulas = Formulas(),
    warmup_momentum: float | None = None,
) -> dict[str, Any]:
    """What Ultralytics really applies for these train arguments on ``world_size`` devices.

    Every value comes from the formulas in ``ultralytics_math`` (copied from BaseTrainer and the
    loaders); nothing from the scaler's plan. ``passed`` needs batch, nbs, optimizer (pinned), lr0,
    momentum, weight_decay, warmup_epochs, warmup_bias_lr. ``drop_last``: Ultralytics' train loader
    drops a short last batch (it does with ``compile=True``); the XLA loader (kind tpu / xla_cpu)
    always does, over a sampler that drops the remainder too. ``warmup_momentum`` (given): the momentum
    an SGD-family optimizer keeps after warmup, which some releases never bring to ``momentum``.
    """
    batch, nbs = int(passed["batch"]), int(passed["nbs"])
    b = um.batch_per_device(batch, world_size)
    acc = um.accumulate(nbs, batch)
    eff: dict[str, Any] = {
        "world_size": world_size,
        "batch": batch,
        "batch_per_device": b,
        "nbs": nbs,
        "accumulate": acc,
        "images_per_step": b * max(world_size, 1) * acc,
        "optimizer": passed["optimizer"],
        "lr0": passed["lr0"],
        "momentum": passed["momentum"],
        "weight_decay": um.optimizer_weight_decay(passed["weight_decay"], batch, nbs),
        "warmup_epochs": um.warmup_epochs_applied(passed["warmup_epochs"], epochs, formulas.warmup_capped),
        "warmup_bias_lr": passed["warmup_bias_lr"],
        "epochs": epochs,
    }
    if dataset_size:
        eff.update(_per_dataset(passed, eff, dataset_size, kind, drop_last, formulas, warmup_momentum))
    return eff


def _per_dataset(passed: dict[str, Any], eff: dict[str, Any], dataset_size: int, kind: str, drop_last: bool,
                 formulas: Formulas, warmup_momentum: float | None) -> dict[str, Any]:
    """What the dataset's size decides: batches and optimizer steps per epoch, the accumulation Ultralytics
    caps for a tiny dataset, the warmup's iterations and what it leaves accumulate and momentum at."""
    b, world_size, epochs, batch, nbs = eff["batch_per_device"], eff["world_size"], eff["epochs"], eff["batch"], eff["nbs"]
    if kind in XLA_KINDS:
        nb = um.xla_batches_per_epoch(dataset_size, b, world_size)
        per_batch, samples = b, um.xla_samples_per_device(dataset_size, world_size)
    else:
        nb = um.batches_per_epoch(dataset_size, b, world_size, drop_last)
        per_batch = um.images_per_batch(dataset_size, b, world_size)
        samples = um.samples_per_device(dataset_size, world_size)
    capped = um.capped_accumulate(eff["accumulate"], nb, epochs, formulas.accumulate_capped)
    nw = um.warmup_iterations(passed["warmup_epochs"], epochs, nb, formulas.warmup_floor, formulas.warmup_capped)
    out = {"accumulate": capped, "images_per_step": per_batch * max(world_size, 1) * capped,
           "dataset_size": dataset_size, "samples_per_device": samples, "batches_per_epoch": nb,
           "optimizer_steps_per_epoch": round(nb / capped, 3) if capped else 0,  # XLA: refused by the plan
           "warmup_iterations": nw,
           "accumulate_after_warmup": um.accumulate_after_warmup(nbs, batch, capped, nw, nb * epochs,
                                                                 formulas.warmup_last_step, formulas.ramp_to_capped)}
    if warmup_momentum is not None and passed["optimizer"] in um.MOMENTUM_RAMPED:
        out["momentum_after_warmup"] = clean(um.momentum_after_warmup(
            passed["momentum"], warmup_momentum, nw, nb * epochs, formulas.warmup_last_step))
    return out
