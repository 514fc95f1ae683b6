"""The hyperparameter scaler: reference hyperparameters -> Ultralytics train arguments for a target.

Pure python: no torch, no ultralytics (``yolo-orch plan`` imports this and must start fast).

The quantity scaled from is the number of images per optimizer step (Ultralytics' effective batch,
``batch * accumulate``), not the device count: Ultralytics' own accumulation already holds it at
``nbs`` for any total batch <= nbs. See docs/scaling.md for the rules and a worked table.

    scale(reference, target, policy="auto") -> ScaleResult

Policies
--------
Ultralytics' detection loss is a SUM over the images of a step, so an SGD-family step (SGD, MuSGD)
already grows with the images per step X at a fixed lr0, while an Adam-family step (Adam, Adamax,
AdamW, NAdam, RAdam, RMSprop) ignores the gradient's scale. With k = X_target / X_reference:

auto    keep the reference's images per step when the target's total batch divides it (only the
        split between batch and accumulation changes); otherwise the rule the scaling-fidelity
        benchmark measured closest to the reference (evidence.py): SGD-family lr0 x sqrt(k) (on top
        of the summed loss's x k: sqrt(k) more movement per epoch), Adam-family lr0 x k (linear:
        the movement per epoch kept).
linear  the mean-gradient step x k (Goyal et al.): lr0 kept for SGD-family, lr0 x k for Adam-family.
sqrt    the mean-gradient step x sqrt(k): lr0 / sqrt(k) for SGD-family, lr0 x sqrt(k) for Adam-family.
        For every k-rule the effective (optimizer) weight decay keeps the weight decay per epoch
        (optimizer steps x lr0 x weight decay). Warmup: when k >= 4, warmup_epochs = max(reference, 5)
        (Goyal et al. 2017 gradual warmup).
table   the practitioner rule: k = target devices / reference devices, effective lr0 x k,
        effective weight decay x k, warmup_epochs at least 5 when k > 1.
none    the reference's values unchanged (the batch is the target's): stock Ultralytics.

Whatever the policy, the passed weight_decay is computed so that Ultralytics' own factor
``batch * accumulate / nbs`` lands on the effective value the rule wants (never scaled twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from orchestrator.scaling import evidence
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.types import POLICIES, ReferenceHyp, ScaleResult, ScalingError, TargetHardware

__all__ = ["scale", "effective_values", "WARMUP_MIN_EPOCHS", "WARMUP_K_THRESHOLD", "LINEAR_LIMIT_IMAGES"]

WARMUP_MIN_EPOCHS = 5.0  # Goyal et al. 2017: gradual warmup over 5 epochs for large minibatches
WARMUP_K_THRESHOLD = 4.0  # lengthen warmup when images per step grow at least this much
LINEAR_LIMIT_IMAGES = 8192  # linear scaling held up to ~8k images per step on ImageNet (Goyal et al.)

PASSED_KEYS = ("batch", "nbs", "optimizer", "lr0", "momentum", "weight_decay", "warmup_epochs", "warmup_bias_lr")


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _clean(x: float) -> float:
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
) -> dict[str, Any]:
    """What Ultralytics really applies for these train arguments on ``world_size`` devices.

    Every value comes from the formulas in ``ultralytics_math`` (copied from BaseTrainer and the
    loaders); nothing from the scaler's plan. ``passed`` needs batch, nbs, optimizer (pinned), lr0,
    momentum, weight_decay, warmup_epochs, warmup_bias_lr. ``drop_last``: Ultralytics' train loader
    drops a short last batch (it does with ``compile=True``); the XLA loader (kind tpu / xla_cpu)
    always does, over a sampler that drops the remainder too.
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
        "warmup_epochs": um.warmup_epochs_applied(passed["warmup_epochs"], epochs),
        "warmup_bias_lr": passed["warmup_bias_lr"],
        "epochs": epochs,
    }
    if dataset_size:
        if kind in XLA_KINDS:
            nb = um.xla_batches_per_epoch(dataset_size, b, world_size)
            per_batch, samples = b, um.xla_samples_per_device(dataset_size, world_size)
        else:
            nb = um.batches_per_epoch(dataset_size, b, world_size, drop_last)
            per_batch = um.images_per_batch(dataset_size, b, world_size)
            samples = um.samples_per_device(dataset_size, world_size)
        capped = um.capped_accumulate(acc, nb, epochs)
        eff["accumulate"] = capped
        eff["images_per_step"] = per_batch * max(world_size, 1) * capped
        eff["dataset_size"] = dataset_size
        eff["samples_per_device"] = samples
        eff["batches_per_epoch"] = nb
        eff["optimizer_steps_per_epoch"] = round(nb / capped, 3) if capped else 0  # XLA: refused by the plan
        eff["warmup_iterations"] = um.warmup_iterations(passed["warmup_epochs"], epochs, nb)
    return eff


XLA_KINDS = ("tpu", "xla_cpu")  # trained by orchestrator/worker/xla with its own fixed-batch loader


def _nearest_totals(total: int, world: int) -> str:
    lo = (total // world) * world
    hi = lo + world
    return f"{lo} or {hi}" if lo >= world else f"{hi}"


def _validate_reference(ref: ReferenceHyp, problems: list[str]) -> str | None:
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


def _target_batch(ref: ReferenceHyp, target: TargetHardware, problems: list[str]) -> tuple[int, str]:
    world = target.devices.world_size
    if target.batch is not None and target.batch_per_device is not None:
        problems.append("target: give batch (total) or batch_per_device, not both")
        return 0, ""
    for name in ("batch", "batch_per_device", "max_batch_per_device"):
        v = getattr(target, name)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            problems.append(f"target.{name}: {v!r} must be an integer >= 1 (AutoBatch is not scaled)")
    if problems:
        return 0, ""
    if target.batch is not None:
        total, why = target.batch, "target.batch"
        if total % world:
            problems.append(
                f"target.batch: {total} is not divisible by {world} devices; "
                f"nearest valid: {_nearest_totals(total, world)}"
            )
    elif target.batch_per_device is not None:
        total, why = target.batch_per_device * world, "target.batch_per_device"
    else:
        total, why = (ref.batch // ref.world_size) * world, "the reference's per-device batch"
    return total, why


def _plan_images(policy: str, images_ref: int, total: int, nbs_ref: int) -> int:
    """Images per optimizer step the target will use."""
    if policy in ("table", "none"):
        return total * um.accumulate(nbs_ref, total)  # what stock Ultralytics does with the reference nbs
    if images_ref % total == 0:
        return images_ref  # accumulation can hold it exactly
    # nearest multiple of the total batch (ties: the smaller one, the conservative lr)
    lo = max(images_ref // total, 1) * total
    hi = lo + total
    return lo if (images_ref - lo) <= (hi - images_ref) or images_ref < total else hi


def _split(
    images: int, total: int, world: int, max_b: int | None, nbs_ref: int, keep_nbs: bool
) -> tuple[int, int, bool]:
    """(total batch to pass, nbs to pass, lowered?) so that batch * accumulate == images exactly.

    nbs is the reference's when ``keep_nbs`` and it already gives ``images`` for this batch; otherwise
    nbs = images. Then Ultralytics' weight-decay factor batch*accumulate/nbs is exactly 1 (the passed
    weight_decay is the effective one), and if Ultralytics halves the batch after a CUDA OOM (first epoch,
    one process only) its accumulation doubles and keeps the same images per step.

    When nbs = images and images is a multiple of batch, accumulate = max(round(images / batch), 1)
    = images / batch: the quotient is an exact integer (IEEE division of integers whose quotient is a
    representable integer is exact), so round() has nothing to round.
    """
    b = total // world
    lowered = False
    if max_b is not None and b > max_b:
        per_dev_images = images // world  # images is a multiple of total = b * world
        b = max(d for d in range(1, max_b + 1) if per_dev_images % d == 0)
        total = b * world
        lowered = True
    if keep_nbs and not lowered and total * um.accumulate(nbs_ref, total) == images:
        nbs = nbs_ref
    else:
        nbs = images
    assert total * um.accumulate(nbs, total) == images, (total, nbs, images)
    return total, nbs, lowered


@dataclass(frozen=True)
class _Rule:
    """What a policy does at this target: the multipliers of the passed lr0 and of the effective
    (optimizer) weight decay, relative to the reference, and the true reason for each."""

    name: str
    family: str  # "SGD" or "Adam": whether the optimizer's step grows with Ultralytics' summed loss
    k: float  # the factor the rule scales by (ScaleResult.k)
    k_text: str
    lr_mult: Fraction | float
    wd_mult: Fraction | float
    lengthen_warmup: bool
    lr_reason: str
    wd_reason: str


def _power(k: Fraction, e: float) -> Fraction | float:
    """k ** e, exact for the integer exponents."""
    return k ** int(e) if e == int(e) else float(k) ** e


def _rule(policy: str, opt: str, images: int, images_ref: int, world: int, world_ref: int) -> _Rule:
    """The policy's rule for optimizer ``opt`` when images per optimizer step go images_ref -> images.

    Every k-rule (auto, linear, sqrt) passes lr0 x k**e and gives the optimizer a weight decay x k**(1-e),
    which keeps the weight decay per epoch (optimizer steps x lr0 x weight decay: steps / k). The
    exponent e differs by family because Ultralytics' loss is a SUM over the images of a step: the
    SGD step already grows with k at a fixed lr0 (mean-gradient lr x k**(e+1)); an Adam-family step
    does not (mean-gradient lr x k**e). linear and sqrt are the literature's rules in mean-gradient
    terms; auto's exponent is the measured one (evidence.AUTO_LR0_EXPONENT).
    """
    k_images = Fraction(images, images_ref)
    sgd = opt in um.SGD_FAMILY
    family = "SGD" if sgd else "Adam"
    k_text = f"k = {images}/{images_ref} = {float(k_images):.2f} images per optimizer step"
    summed = (
        f"Ultralytics' summed loss already grows the {opt} step with the images per step (x {float(k_images):.4g})"
        if sgd
        else f"the {opt} update ignores the gradient's scale, so Ultralytics' summed loss changes nothing"
    )
    if policy == "none":
        if k_images == 1:
            return _Rule("none", family, 1.0, "no scaling", Fraction(1), Fraction(1), False, "", "")
        per_epoch = (
            "the linear rule in mean-gradient terms (Goyal et al. 2017)"
            if sgd
            else f"{float(k_images):.4g} x fewer steps of the same size per epoch"
        )
        return _Rule(
            "none", family, 1.0, "no scaling", Fraction(1), k_images, False,
            f"policy none: {summed}: {per_epoch}",
            "policy none: Ultralytics multiplies weight decay by batch*accumulate/nbs",
        )
    if policy == "table":
        d = Fraction(world, world_ref)
        lr_text = f"table rule lr0 x {float(d):.4g} (k = {world}/{world_ref} devices)"
        if sgd and k_images != 1:
            lr_text += f"; with the summed loss the mean-gradient SGD step grows x {float(d * k_images):.4g}"
        if d == 1 and k_images == 1:
            lr_text = ""
        return _Rule(
            "table", family, float(d), f"k = {world}/{world_ref} = {float(d):.2f} devices", d, d, d > 1, lr_text,
            f"table rule effective weight decay x {float(d):.4g} (k = {world}/{world_ref} devices)",
        )
    if policy == "auto":
        e = evidence.AUTO_LR0_EXPONENT[family]
    else:  # the literature's rule in mean-gradient terms: linear x k, sqrt x sqrt(k)
        e = (1.0 if policy == "linear" else 0.5) - (1.0 if sgd else 0.0)
    lr_mult = _power(k_images, e)
    wd_mult = k_images / lr_mult if isinstance(lr_mult, Fraction) else float(k_images) / lr_mult
    mean_exp = e + 1 if sgd else e  # the mean-gradient learning rate grows x k**mean_exp
    k = float(k_images)
    if k == 1:
        lr_reason = ""
    elif policy == "auto":
        measured = evidence.gaps(family, k, "auto")
        named = {0.5: ", the square-root rule (Malladi et al. 2022)", 1.0: ", the linear rule"}
        how = f"{summed}; lr0 x k^{e:g}" + (" on top" if sgd else named.get(mean_exp, ""))
        lr_reason = (
            f"auto ({family}-family {opt}): {how}: step x {k ** mean_exp:.4g} in mean-gradient terms, movement per "
            f"epoch x {k ** (mean_exp - 1):.4g} ({k:.4g} x fewer optimizer steps); {k_text}; "
            + (f"measured: {evidence.gaps_text(measured)}" if measured else _auto_basis(k))
        )
    else:
        lr_reason = (
            f"{policy} rule (forced by policy): step x {k ** mean_exp:.4g} = "
            f"{'k' if policy == 'linear' else 'sqrt(k)'} in mean-gradient terms; {summed}, so lr0 x "
            f"{float(lr_mult):.4g}; {k_text}"
        )
    wd_reason = (
        f"{policy} rule keeps the weight decay per epoch (optimizer steps x lr0 x weight decay: "
        f"steps x 1/{k:.4g}, lr0 x {float(lr_mult):.4g}, weight decay x {float(wd_mult):.4g})"
    )
    return _Rule(policy, family, k, k_text, lr_mult, wd_mult, k >= WARMUP_K_THRESHOLD, lr_reason, wd_reason)


def _auto_basis(k: float) -> str:
    if k > evidence.MEASURED_MAX_K:
        return f"beyond the measured k <= {evidence.MEASURED_MAX_K}, extrapolated (docs/scaling.md section 7)"
    return "not measured at this k (docs/scaling.md section 7)"


def _table_warning(ref: ReferenceHyp, target: TargetHardware, rule: _Rule, images: int, images_ref: int) -> str:
    try:
        auto = scale(ref, target, "auto")
        auto_text = (
            f"`auto` would pass lr0 {_fmt(auto.passed['lr0'])} and weight_decay "
            f"{_fmt(auto.passed['weight_decay'])} (k = {auto.k:.2f})"
        )
    except ScalingError as e:
        auto_text = f"`auto` would refuse: {e}"
    measured = evidence.gaps(rule.family, images / images_ref, "table") if rule.k == 1 else []
    return (
        f"policy table scales by the device count (k = {rule.k:.2f}), but images per optimizer step go "
        f"{images_ref} -> {images}"
        + (" (Ultralytics' accumulation held them at nbs)" if images == images_ref else "")
        + f": lr0 and weight decay are multiplied by {rule.k:.2f} for a {images / images_ref:.2f}x change in "
        f"images per step"
        + (f" (x {rule.k * images / images_ref:.4g} in mean-gradient terms with SGD's summed loss)"
           if rule.family == "SGD" and images != images_ref else "")
        + (f"; measured on one process, where it keeps lr0 and the optimizer's weight decay: "
           f"{evidence.gaps_text(measured)}"
           if measured else "")
        + f"; {auto_text}"
    )


def _few_steps_warning(eff: dict[str, Any], ref_eff: dict[str, Any], k: float) -> list[str]:
    """More images per step at the same epochs means k x fewer optimizer steps in all; below what was
    measured to be enough, say what was lost and offer the epochs that keep the reference's steps."""
    spe, spe_ref = eff.get("optimizer_steps_per_epoch"), ref_eff.get("optimizer_steps_per_epoch")
    if k <= 1 or not spe or not spe_ref:
        return []
    epochs = eff["epochs"]
    steps, steps_ref = spe * epochs, spe_ref * epochs
    if steps >= evidence.KEPT_WITH_STEPS:
        return []
    keep = math.ceil(steps_ref / spe)
    few = evidence.FEW_STEPS
    return [
        f"this run makes {steps:.0f} optimizer steps in all ({spe:g} an epoch x {epochs} epochs; the reference "
        f"made {steps_ref:.0f}): below the {evidence.KEPT_WITH_STEPS} with which auto kept the outcome; measured "
        f"with fewer, auto: {few.text()}; to make the reference's optimizer steps, train {keep} epochs "
        f"(--set epochs={keep}), at {keep / epochs:.3g}x the cost (measured: {evidence.FEW_STEPS_LONGER})"
    ]


def _per_step_warnings(
    opt: str, rule: _Rule, passed: dict[str, Any], eff: dict[str, Any], ref_eff: dict[str, Any],
    images: int, images_ref: int,
) -> list[str]:
    """What changes with the images per optimizer step besides lr0 and weight decay, and where a rule
    is an approximation or beyond what was measured."""
    out = []
    k = images / images_ref
    if rule.name in ("auto", "linear", "sqrt") and images > LINEAR_LIMIT_IMAGES and k > 1:
        out.append(
            f"{images} images per optimizer step: large-batch rules held up to about {LINEAR_LIMIT_IMAGES} in "
            "Goyal et al.; beyond that expect a gap, or use a smaller batch"
        )
    if rule.name == "auto" and k > evidence.MEASURED_MAX_K:
        out.append(
            f"k = {k:.4g} is beyond the measured k <= {evidence.MEASURED_MAX_K} (docs/scaling.md section 7): "
            "auto extrapolates its rule; compare a short run against the reference before a long one"
        )
    if rule.wd_mult != 1 and opt in um.COUPLED_L2 and opt not in um.SGD_FAMILY:
        out.append(
            f"{opt} applies weight decay as coupled L2 (torch): the per-epoch rule for weight decay is exact for "
            "SGD and AdamW's decoupled decay; treat the weight_decay change as an approximation"
        )
    if opt == "MuSGD" and k != 1:
        out.append(
            "MuSGD is scaled as SGD-family (its SGD branch steps with the summed gradient); its Muon branch "
            "(0.2 x lr, orthogonalised) ignores the gradient's scale, so its movement per epoch follows lr0 / k"
        )
    if k != 1:
        spe_t, spe_r = eff.get("optimizer_steps_per_epoch"), ref_eff.get("optimizer_steps_per_epoch")
        horizon = (
            f": its ramp (tau = {um.EMA_TAU} updates) spans {um.EMA_TAU / spe_r:.3g} epochs at the reference and "
            f"{um.EMA_TAU / spe_t:.3g} here"
            if spe_t and spe_r
            else ""
        )
        out.append(
            f"images per optimizer step x {k:.4g}: Ultralytics' EMA of the weights updates once per optimizer "
            f"step{horizon}; clip_grad_norm_(max_norm=10) acts on the summed gradient, whose norm grows with the "
            "images per step, so clipping can bite more often"
            + (" and shortens those SGD steps" if opt in um.SGD_FAMILY else "")
        )
    out += _few_steps_warning(eff, ref_eff, k)
    wbl = passed["warmup_bias_lr"]
    if eff["warmup_epochs"] > 0 and passed["lr0"] > wbl > 0 and ref_eff["lr0"] <= wbl:
        out.append(
            f"lr0 {_fmt(passed['lr0'])} is above warmup_bias_lr {_fmt(wbl)}: during warmup Ultralytics moves the "
            f"bias lr from warmup_bias_lr to lr0, so the bias lr now rises instead of falling"
        )
    return out


def scale(reference: ReferenceHyp, target: TargetHardware, policy: str = "auto") -> ScaleResult:
    """Ultralytics train arguments for ``target`` that reproduce ``reference`` under ``policy``."""
    ref = reference
    problems: list[str] = []
    if policy not in POLICIES:
        problems.append(f"policy: '{policy}' is not one of {', '.join(POLICIES)}")
    opt_ref = _validate_reference(ref, problems)
    if problems:
        raise ScalingError(problems)
    devices = target.devices
    world = devices.world_size
    total_req, batch_source = _target_batch(ref, target, problems)
    if problems:
        raise ScalingError(problems)

    reasons_for: dict[str, list[str]] = {k: [] for k in PASSED_KEYS}  # why a value changed
    kept_for: dict[str, list[str]] = {k: [] for k in PASSED_KEYS}  # why a value stays though X changes
    warnings: list[str] = []

    # ---- 1. resolve the reference's optimizer (what the reference run really trained with)
    base = {
        "optimizer": opt_ref,
        "lr0": ref.lr0,
        "momentum": ref.momentum,
        "warmup_bias_lr": ref.warmup_bias_lr,
    }
    if opt_ref == "auto":
        if ref.nc is not None and ref.dataset_size is not None:
            name, lr, mom = um.resolve_auto_optimizer(ref.nc, ref.dataset_size, ref.batch, ref.nbs, ref.epochs)
            iters = um.auto_iterations(ref.dataset_size, ref.batch, ref.nbs, ref.epochs)
            why = (
                f"optimizer=auto resolved as Ultralytics build_optimizer does at the reference scale "
                f"(iterations = ceil({ref.dataset_size}/max({ref.batch},{ref.nbs}))*{ref.epochs} = {iters} "
                f"{'>' if iters > um.AUTO_ITERATIONS_THRESHOLD else '<='} {um.AUTO_ITERATIONS_THRESHOLD})"
            )
            base["optimizer"] = name
            reasons_for["optimizer"].append(f"{why}; pinned so Ultralytics cannot re-pick it at the target")
            if name == "AdamW":
                base["lr0"] = lr
                reasons_for["lr0"].append(f"optimizer=auto used AdamW lr = round(0.002*5/(4+nc={ref.nc}), 6) = {_fmt(lr)}")
                base["momentum"] = mom
                reasons_for["momentum"].append("optimizer=auto builds AdamW with betas=(0.9, 0.999)")
            else:
                base["lr0"] = lr
                reasons_for["lr0"].append(f"optimizer=auto used MuSGD lr {_fmt(lr)}")
                # build_optimizer gives the groups momentum 0.9, but _do_train's warmup then ramps every
                # group's momentum from warmup_momentum to args.momentum (left at the user's value) and
                # leaves it there; with no warmup it stays 0.9.
                nb_ref = um.batches_per_epoch(ref.dataset_size, ref.batch // ref.world_size, ref.world_size)
                if um.warmup_iterations(ref.warmup_epochs, ref.epochs, nb_ref) == 0:
                    base["momentum"] = mom
                    reasons_for["momentum"].append("optimizer=auto built MuSGD with momentum 0.9 and no warmup moved it")
            base["warmup_bias_lr"] = 0.0
            reasons_for["warmup_bias_lr"].append("optimizer=auto sets warmup_bias_lr = 0.0 (build_optimizer)")
            warnings.append(
                f"reference optimizer=auto: Ultralytics ignored lr0={_fmt(ref.lr0)}"
                + (f" and momentum={_fmt(ref.momentum)}" if name == "AdamW" else "")
                + f" and trained with {name} lr0={_fmt(base['lr0'])}; the scaler pins that choice "
                "(passing optimizer=auto would discard lr0 again)"
            )
        else:
            base["optimizer"] = "SGD"
            missing = " and ".join(n for n in ("nc", "dataset_size") if getattr(ref, n) is None)
            reasons_for["optimizer"].append(
                f"optimizer=auto cannot be resolved without reference.{missing}; pinned SGD with the reference lr0"
            )
            warnings.append(
                f"reference optimizer=auto with {missing} unknown: pinned SGD lr0={_fmt(ref.lr0)}. Ultralytics "
                "ignores lr0/momentum under auto (it picks AdamW with a fitted lr or MuSGD lr 0.01), so the "
                "reference run probably did NOT use these values; give nc and dataset_size to resolve it"
            )
    elif opt_ref != ref.optimizer:
        reasons_for["optimizer"].append(f"Ultralytics' spelling of '{ref.optimizer}'")
    opt = base["optimizer"]

    # ---- 2. the reference's effective values
    ref_passed = {
        "batch": ref.batch,
        "nbs": ref.nbs,
        "optimizer": opt,
        "lr0": base["lr0"],
        "momentum": base["momentum"],
        "weight_decay": ref.weight_decay,
        "warmup_epochs": ref.warmup_epochs,
        "warmup_bias_lr": base["warmup_bias_lr"],
    }
    ref_eff = effective_values(ref_passed, ref.world_size, ref.epochs, ref.dataset_size, drop_last=target.drop_last)
    images_ref = ref.batch * um.accumulate(ref.nbs, ref.batch)  # uncapped: the plan, not tiny-data effects

    # ---- 3. plan the target's images per optimizer step and the batch/nbs split
    images = _plan_images(policy, images_ref, total_req, ref.nbs)
    # keep the reference nbs when nothing is rescaled (or the policy is stock Ultralytics behaviour)
    keep_nbs = policy in ("table", "none") or images == images_ref
    total, nbs, lowered = _split(images, total_req, world, target.max_batch_per_device, ref.nbs, keep_nbs)
    b = total // world
    if lowered:
        reasons_for["batch"].append(
            f"per-device batch {total_req // world} ({batch_source}) is above max_batch_per_device "
            f"{target.max_batch_per_device}; lowered to {b} per device x {world} devices, accumulation "
            f"({images // total} steps) makes up the planned {images} images per optimizer step"
        )
    else:
        reasons_for["batch"].append(f"{b} per device x {world} devices ({batch_source})")
    if nbs != ref.nbs:
        acc = um.accumulate(nbs, total)
        stock = um.accumulate(ref.nbs, total)
        reasons_for["nbs"].append(
            f"set to the planned {images} images per optimizer step: accumulate = max(round({nbs}/{total}), 1) "
            f"= {acc}, {total} x {acc} = {images} exactly (nbs {ref.nbs} would give accumulate {stock}: "
            f"{total * stock} images); Ultralytics' weight-decay factor batch*accumulate/nbs becomes 1"
            + (
                f"; if Ultralytics halves the batch after an out-of-memory error (first epoch, one process only), "
                f"accumulation doubles and keeps {images} images per step"
                if world == 1 else ""
            )
        )

    # ---- 4. the rule
    rule = _rule(policy, opt, images, images_ref, world, ref.world_size)
    k, k_text, lr_mult, wd_mult = rule.k, rule.k_text, rule.lr_mult, rule.wd_mult
    wd_eff_ref = ref.weight_decay * Fraction(images_ref, ref.nbs)  # exact factor: batch*accumulate/nbs
    lr0 = base["lr0"] if lr_mult == 1 else _clean(base["lr0"] * float(lr_mult))
    if rule.lr_reason:  # printed as "lr0 a -> b: ..." or "lr0 a kept: ..."
        reasons_for["lr0"].append(rule.lr_reason)
        kept_for["lr0"].append(rule.lr_reason)

    # passed wd so that wd_passed * total*acc/nbs == wd_eff_ref * wd_mult (images == total*acc)
    factor = Fraction(images_ref * nbs, ref.nbs * images)  # (images_ref/nbs_ref) / (images/nbs)
    m = wd_mult * factor  # exact Fraction unless the sqrt rule made it a float
    wd = ref.weight_decay if m == 1 else _clean(ref.weight_decay * float(m))
    wd_target = float(wd_eff_ref) * float(wd_mult)
    if wd != ref.weight_decay:
        reasons_for["weight_decay"].append(
            f"{rule.wd_reason}: effective (optimizer) weight decay {_fmt(float(wd_eff_ref))} -> {_fmt(wd_target)}; "
            f"passed value = effective / (batch*accumulate/nbs = {images}/{nbs}), which Ultralytics multiplies "
            "back in, so its own weight-decay scaling is not applied twice"
        )
    elif wd_mult != 1:  # the passed value stays, what the optimizer gets does not
        kept_for["weight_decay"].append(
            f"{rule.wd_reason}; Ultralytics applies {_fmt(wd_target)} (x batch*accumulate/nbs = {images}/{nbs})"
        )

    warmup = ref.warmup_epochs
    if rule.lengthen_warmup and ref.warmup_epochs < WARMUP_MIN_EPOCHS:
        warmup = WARMUP_MIN_EPOCHS
        reasons_for["warmup_epochs"].append(
            f"gradual warmup of at least {WARMUP_MIN_EPOCHS:g} epochs (Goyal et al. 2017) because {k_text} "
            f"({'>= ' + format(WARMUP_K_THRESHOLD, 'g') if rule.name != 'table' else '> 1'})"
        )

    passed: dict[str, Any] = {
        "batch": total,
        "nbs": nbs,
        "optimizer": opt,
        "lr0": lr0,
        "momentum": base["momentum"],
        "weight_decay": wd,
        "warmup_epochs": warmup,
        "warmup_bias_lr": base["warmup_bias_lr"],
    }

    for key in um.FRACTION_KEYS & passed.keys():
        if not 0.0 <= passed[key] <= 1.0:
            problems.append(
                f"{key}: {_fmt(passed[key])} after {rule.name} scaling ({k_text}) is outside [0, 1], which "
                f"Ultralytics' check_cfg rejects; use a smaller target batch, "
                + ("policy none, " if rule.name != "none" else "")
                + f"or a lower reference {key}"
            )
    if problems:
        raise ScalingError(problems)

    eff = effective_values(passed, world, ref.epochs, ref.dataset_size, devices.kind, target.drop_last)

    if opt_ref == "auto" and ref.nc is not None and ref.dataset_size is not None:
        name_t, _, _ = um.resolve_auto_optimizer(ref.nc, ref.dataset_size, total, nbs, ref.epochs)
        if name_t != opt:
            warnings.append(
                f"left on optimizer=auto, Ultralytics would pick {name_t} at the target (batch {total}, "
                f"nbs {nbs}), not the reference's {opt}: another reason it is pinned"
            )

    # ---- 5. reasons: one line per passed value that differs from the reference, and per value kept on
    # purpose while the images per step change (or whose applied value changes without it)
    reasons = []
    for key in PASSED_KEYS:
        old = getattr(ref, key)
        if passed[key] != old:
            why = "; ".join(reasons_for[key]) or "derived"
            reasons.append(f"{key} {_fmt(old)} -> {_fmt(passed[key])}: {why}")
        elif kept_for[key]:
            reasons.append(f"{key} {_fmt(old)} kept: {'; '.join(kept_for[key])}")

    # ---- 6. warnings
    if policy == "table":
        warnings.append(_table_warning(ref, target, rule, images, images_ref))
    warnings += _per_step_warnings(opt, rule, passed, eff, ref_eff, images, images_ref)
    if warmup > um.warmup_epochs_applied(warmup, ref.epochs):
        warnings.append(
            f"warmup_epochs {_fmt(warmup)} is capped by Ultralytics at epochs - 1 = {max(ref.epochs - 1, 0)}"
        )
    if b < ref.batch // ref.world_size:
        warnings.append(
            f"per-device batch {ref.batch // ref.world_size} -> {b}: BatchNorm statistics are per device "
            "(Ultralytics has no SyncBatchNorm) and get noisier with fewer images per device"
        )
    if ref.dataset_size and eff["images_per_step"] != images:
        warnings.append(
            f"accumulate is capped at batches_per_epoch*epochs = {eff['batches_per_epoch']}*{ref.epochs} by "
            f"Ultralytics: the dataset is too small for {images} images per step ({eff['images_per_step']} used)"
        )
    nw_t, nw_r = eff.get("warmup_iterations"), ref_eff.get("warmup_iterations")
    if nw_t is not None and nw_r is not None and nw_t < min(nw_r, 100):
        warnings.append(
            f"warmup is only {nw_t} iterations per device (reference {nw_r}): warmup_epochs count epochs and "
            "each device sees fewer batches per epoch; raise warmup_epochs if the first steps diverge"
        )
    if devices.kind == "tpu":
        warnings.append(
            f"tpu: batch {b} per core x {world} cores, bf16; Ultralytics itself has no XLA path: the "
            "orchestrator's XLA worker applies these same Ultralytics formulas"
        )
    if devices.nodes > 1:
        warnings.append(
            f"{devices.nodes} nodes: Ultralytics launches single-node DDP only; the orchestrator runs torchrun "
            "per node with the same maths"
        )

    return ScaleResult(
        devices=str(devices) or devices.kind,
        policy=policy,
        passed=passed,
        effective=eff,
        reasons=reasons,
        warnings=warnings,
        reference_effective=ref_eff,
        k=k,
    )
