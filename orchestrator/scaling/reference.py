"""The reference side of the scaler: check the reference hyperparameters and find what the reference
run really trained with (optimizer=auto resolved as Ultralytics' build_optimizer does)."""

from __future__ import annotations

from typing import Any

from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.effective import fmt
from orchestrator.scaling.types import ReferenceHyp


def validate_reference(ref: ReferenceHyp, problems: list[str]) -> str | None:
    for name in ("world_size", "batch", "nbs", "epochs"):
        v = getattr(ref, name)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            extra = " (AutoBatch, batch=-1 or a fraction, cannot be scaled: give the batch it chose)" if name == "batch" else ""
            problems.append(f"reference.{name}: {v!r} must be an integer >= 1{extra}")
    opt = um.canonical_optimizer(ref.optimizer)
    if opt is None:
        problems.append(
            f"reference.optimizer: '{ref.optimizer}' is not an Ultralytics optimizer; "
            f"expected one of {', '.join(um.OPTIMIZERS)} or auto"
        )
    if not problems and ref.batch % ref.world_size:
        problems.append(
            f"reference.batch: {ref.batch} is not divisible by reference.world_size {ref.world_size} "
            f"(Ultralytics silently drops the remainder); give the batch it really used: "
            f"{(ref.batch // ref.world_size) * ref.world_size}"
        )
    for name in ("nc", "dataset_size"):
        v = getattr(ref, name)
        if v is not None and (not isinstance(v, int) or v < 1):
            problems.append(f"reference.{name}: {v!r} must be an integer >= 1 or unset")
    return opt


def resolve_reference(ref: ReferenceHyp, opt_ref: str, reasons_for: dict[str, list[str]],
                      warnings: list[str]) -> dict[str, Any]:
    """The reference's optimizer, lr0, momentum and warmup_bias_lr as the reference run trained with
    them; under optimizer=auto what Ultralytics picked, with why in `reasons_for` and `warnings`."""
    base = {"optimizer": opt_ref, "lr0": ref.lr0, "momentum": ref.momentum, "warmup_bias_lr": ref.warmup_bias_lr}
    if opt_ref == "auto" and ref.nc is not None and ref.dataset_size is not None:
        _resolve_auto(ref, base, reasons_for, warnings)
    elif opt_ref == "auto":
        base["optimizer"] = "SGD"
        missing = " and ".join(n for n in ("nc", "dataset_size") if getattr(ref, n) is None)
        reasons_for["optimizer"].append(
            f"optimizer=auto cannot be resolved without reference.{missing}; pinned SGD with the reference lr0"
        )
        warnings.append(
            f"reference optimizer=auto with {missing} unknown: pinned SGD lr0={fmt(ref.lr0)}. Ultralytics "
            "ignores lr0/momentum under auto (it picks AdamW with a fitted lr or MuSGD lr 0.01), so the "
            "reference run probably did NOT use these values; give nc and dataset_size to resolve it"
        )
    elif opt_ref != ref.optimizer:
        reasons_for["optimizer"].append(f"Ultralytics' spelling of '{ref.optimizer}'")
    return base


def _resolve_auto(ref: ReferenceHyp, base: dict[str, Any], reasons_for: dict[str, list[str]],
                  warnings: list[str]) -> None:
    name, lr, mom = um.resolve_auto_optimizer(ref.nc, ref.dataset_size, ref.batch, ref.nbs, ref.epochs,
                                              ref.formulas.auto_picks)
    iters = um.auto_iterations(ref.dataset_size, ref.batch, ref.nbs, ref.epochs)
    why = (
        f"optimizer=auto resolved as Ultralytics build_optimizer does at the reference scale "
        f"(iterations = ceil({ref.dataset_size}/max({ref.batch},{ref.nbs}))*{ref.epochs} = {iters} "
        f"{'>' if iters > um.AUTO_ITERATIONS_THRESHOLD else '<='} {um.AUTO_ITERATIONS_THRESHOLD})"
    )
    base["optimizer"] = name
    reasons_for["optimizer"].append(f"{why}; pinned so Ultralytics cannot re-pick it at the target")
    base["lr0"] = lr
    if name == "AdamW":
        reasons_for["lr0"].append(f"optimizer=auto used AdamW lr = round(0.002*5/(4+nc={ref.nc}), 6) = {fmt(lr)}")
        base["momentum"] = mom
        reasons_for["momentum"].append("optimizer=auto builds AdamW with betas=(0.9, 0.999)")
    else:
        reasons_for["lr0"].append(f"optimizer=auto used {name} lr {fmt(lr)}")
        # build_optimizer gives the groups momentum 0.9, but _do_train's warmup then ramps every
        # group's momentum from warmup_momentum to args.momentum (left at the user's value) and
        # leaves it there; with no warmup it stays 0.9.
        nb_ref = um.batches_per_epoch(ref.dataset_size, ref.batch // ref.world_size, ref.world_size)
        f = ref.formulas
        if um.warmup_iterations(ref.warmup_epochs, ref.epochs, nb_ref, f.warmup_floor, f.warmup_capped) == 0:
            base["momentum"] = mom
            reasons_for["momentum"].append(f"optimizer=auto built {name} with momentum 0.9 and no warmup moved it")
    base["warmup_bias_lr"] = 0.0
    reasons_for["warmup_bias_lr"].append("optimizer=auto sets warmup_bias_lr = 0.0 (build_optimizer)")
    warnings.append(
        f"reference optimizer=auto: Ultralytics ignored lr0={fmt(ref.lr0)}"
        + (f" and momentum={fmt(ref.momentum)}" if name == "AdamW" else "")
        + f" and trained with {name} lr0={fmt(base['lr0'])}; the scaler pins that choice "
        "(passing optimizer=auto would discard lr0 again)"
    )
