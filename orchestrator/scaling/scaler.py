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
        split between batch and accumulation changes); otherwise the rule the evidence decided for the
        job's task, start, optimizer family and k (evidence.decision, docs/scaling.md 7I): `linear`,
        the family's default, unless a measured alternative beat it with a 95 % interval above 0
        (so far only for SGD-family fine-tuning). The device is never part of the key.
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

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from orchestrator.scaling import advice
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.batch import plan_images, split, target_batch
from orchestrator.scaling.effective import clean, effective_values, fmt
from orchestrator.scaling.reference import resolve_reference, validate_reference
from orchestrator.scaling.policies import Rule, rule_for
from orchestrator.scaling.rules import DEVICE_RULE, STOCK_IMAGES, WARMUP_MIN_EPOCHS
from orchestrator.scaling.types import POLICIES, WARMUPS, ReferenceHyp, ScaleResult, ScalingError, TargetHardware
from orchestrator.tasks import MEAN_LOSS_TASKS

__all__ = ["scale"]

PASSED_KEYS = ("batch", "nbs", "optimizer", "lr0", "momentum", "weight_decay", "warmup_epochs", "warmup_bias_lr")


@dataclass
class _Notes:
    """What the steps of `scale` say: per passed key why it changed (or stays though X changes), the
    warnings, and the mechanisms behind the reasons (plan --explain)."""

    changed: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in PASSED_KEYS})
    kept: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in PASSED_KEYS})
    warnings: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


def scale(reference: ReferenceHyp, target: TargetHardware, policy: str = "auto", warmup: str = "auto") -> ScaleResult:
    """Ultralytics train arguments for ``target`` that reproduce ``reference`` under ``policy``;
    ``warmup`` "keep" keeps the reference's warmup_epochs where the rule would lengthen them."""
    ref, world = reference, target.devices.world_size
    opt_ref, total_req, batch_source = _checked_inputs(ref, target, policy, warmup)
    notes = _Notes()
    # 1. what the reference run really trained with, and what Ultralytics applied there
    ref_passed, ref_eff = _reference_as_trained(ref, opt_ref, target, notes)
    images_ref = ref.batch * um.accumulate(ref.nbs, ref.batch)  # uncapped: the plan, not tiny-data effects
    # 2. the target's images per optimizer step and the batch/nbs split that gives them exactly
    images, total, nbs = _images_and_split(policy, ref, target, total_req, batch_source, images_ref, notes)
    # 3. the policy's rule: lr0, the weight decay, the warmup
    rule = rule_for(policy, ref_passed["optimizer"], images, images_ref, world, ref.world_size,
                    _step_growth(ref, images, images_ref, total, nbs, world), ref.task, ref.start)
    passed = _apply(ref, rule, dict(ref_passed, batch=total, nbs=nbs), images, images_ref, warmup, notes)
    eff = effective_values(passed, world, ref.epochs, ref.dataset_size, target.devices.kind, target.drop_last,
                           ref.formulas, ref.warmup_momentum)
    # 4. the warnings, and the mechanisms behind the reasons
    notes.warnings += _auto_pick_warning(ref, opt_ref, passed)
    if policy == DEVICE_RULE:
        notes.warnings.append(advice.table_warning(rule, images, images_ref, _auto_alternative(ref, target)))
    notes.warnings += advice.per_step_warnings(passed["optimizer"], rule, passed, eff, ref_eff, images, images_ref,
                                               ref.start, ref.task)
    notes.warnings += advice.target_warnings(ref, target.devices, passed, eff, ref_eff, images, target.sync_bn)
    details = [line for line in [advice.step_detail(rule)] if line] + notes.details + advice.ema_and_clip_details(
        passed["optimizer"], eff, ref_eff, images / images_ref)
    return ScaleResult(devices=str(target.devices) or target.devices.kind, policy=policy, passed=passed,
                       effective=eff, reasons=advice.reason_lines(ref, passed, notes.changed, notes.kept),
                       warnings=notes.warnings, reference_effective=ref_eff, k=rule.k, details=details)


def _reference_as_trained(ref: ReferenceHyp, opt_ref: str, target: TargetHardware,
                          notes: _Notes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference's passed values (optimizer=auto resolved) and what Ultralytics applied with them."""
    base = resolve_reference(ref, opt_ref, notes.changed, notes.warnings)
    known = {"batch": ref.batch, "nbs": ref.nbs, "weight_decay": ref.weight_decay,
             "warmup_epochs": ref.warmup_epochs, **base}
    ref_passed = {key: known[key] for key in PASSED_KEYS}
    return ref_passed, effective_values(ref_passed, ref.world_size, ref.epochs, ref.dataset_size,
                                        drop_last=target.drop_last, formulas=ref.formulas,
                                        warmup_momentum=ref.warmup_momentum)


def _images_and_split(policy: str, ref: ReferenceHyp, target: TargetHardware, total_req: int, batch_source: str,
                      images_ref: int, notes: _Notes) -> tuple[int, int, int]:
    """The target's images per step, total batch and nbs, with the reasons for the batch and nbs."""
    world = target.devices.world_size
    images = plan_images(policy, images_ref, total_req, ref.nbs)
    keep_nbs = policy in STOCK_IMAGES or images == images_ref  # stock Ultralytics, or nothing rescaled
    total, nbs, lowered = split(images, total_req, world, target.max_batch_per_device, ref.nbs, keep_nbs)
    notes.changed["batch"].append(advice.batch_reason(total_req, total, images, world, lowered, batch_source,
                                                      target.max_batch_per_device))
    if nbs != ref.nbs:
        notes.changed["nbs"].append(advice.nbs_reason(nbs, total, images))
        notes.details.append(advice.nbs_detail(ref.nbs, nbs, total, world))
    return images, total, nbs


def _apply(ref: ReferenceHyp, rule: Rule, passed: dict[str, Any], images: int, images_ref: int, warmup: str,
           notes: _Notes) -> dict[str, Any]:
    """The reference's passed values with the rule's lr0, weight decay and warmup; refused out of range."""
    lr0 = passed["lr0"]
    passed["lr0"] = lr0 if rule.lr_mult == 1 else clean(lr0 * float(rule.lr_mult))
    lr_reason = advice.lr_reason(rule)
    if lr_reason:  # printed as "lr0 a -> b: ..." or "lr0 a kept: ..."
        notes.changed["lr0"].append(lr_reason)
        notes.kept["lr0"].append(lr_reason)
    passed["weight_decay"] = _weight_decay(ref, rule, images, images_ref, passed["nbs"], notes.changed, notes.kept)
    passed["warmup_epochs"] = _warmup(ref, rule, warmup, notes.changed, notes.kept)
    _refuse_out_of_range(passed, rule)
    return passed


def _step_growth(ref: ReferenceHyp, images: int, images_ref: int, total: int, nbs: int, world: int) -> Fraction:
    """By how much Ultralytics' gradient per optimizer step grows at a fixed lr0 (the mean gradient's
    multiple, target over reference). A summed loss (detect, segment, pose, obb, semantic, depth): with the images per
    step. Classify's loss is a mean per micro-batch that `_do_train` multiplies by the world size under
    DDP, and accumulation adds `accumulate` of them: with the micro-batches per step, world x accumulate."""
    if ref.task not in MEAN_LOSS_TASKS:
        return Fraction(images, images_ref)
    return Fraction(world * um.accumulate(nbs, total), ref.world_size * um.accumulate(ref.nbs, ref.batch))


def _checked_inputs(ref: ReferenceHyp, target: TargetHardware, policy: str, warmup: str) -> tuple[str, int, str]:
    """(the reference's optimizer in Ultralytics' spelling, the target's total batch, where it came
    from); ScalingError with one line per problem."""
    problems: list[str] = []
    if policy not in POLICIES:
        problems.append(f"policy: '{policy}' is not one of {', '.join(POLICIES)}")
    if warmup not in WARMUPS:
        problems.append(f"scaling.warmup: '{warmup}' is not one of {', '.join(WARMUPS)}")
    opt_ref = validate_reference(ref, problems)
    if problems:
        raise ScalingError(problems)
    total, source = target_batch(ref, target, problems)
    if problems:
        raise ScalingError(problems)
    return opt_ref, total, source


def _weight_decay(ref: ReferenceHyp, rule: Rule, images: int, images_ref: int, nbs: int,
                  reasons_for: dict[str, list[str]], kept_for: dict[str, list[str]]) -> float:
    """The weight_decay to pass so that Ultralytics' own factor batch*accumulate/nbs (= images/nbs)
    lands on the effective value the rule wants: wd_passed * images/nbs == wd_eff_ref * wd_mult."""
    wd_eff_ref = ref.weight_decay * Fraction(images_ref, ref.nbs)  # exact factor: batch*accumulate/nbs
    m = rule.wd_mult * Fraction(images_ref * nbs, ref.nbs * images)  # exact unless the sqrt rule made a float
    wd = ref.weight_decay if m == 1 else clean(ref.weight_decay * float(m))
    wd_target = float(wd_eff_ref) * float(rule.wd_mult)
    if wd != ref.weight_decay:
        reasons_for["weight_decay"].append(advice.wd_changed(rule, float(wd_eff_ref), wd_target, images, nbs))
    elif rule.wd_mult != 1:  # the passed value stays, what the optimizer gets does not
        kept_for["weight_decay"].append(advice.wd_kept(rule, wd_target, images, nbs))
    return wd


def _warmup(ref: ReferenceHyp, rule: Rule, warmup: str, reasons_for: dict[str, list[str]],
            kept_for: dict[str, list[str]]) -> float:
    if not rule.lengthen_warmup or ref.warmup_epochs >= WARMUP_MIN_EPOCHS:
        return ref.warmup_epochs
    if warmup == "keep":
        kept_for["warmup_epochs"].append(advice.warmup_kept())
        return ref.warmup_epochs
    reasons_for["warmup_epochs"].append(advice.warmup_lengthened(rule))
    return WARMUP_MIN_EPOCHS


def _refuse_out_of_range(passed: dict[str, Any], rule: Rule) -> None:
    problems = [
        f"{key}: {fmt(passed[key])} after {rule.name} scaling ({advice.k_text(rule)}) is outside [0, 1], which "
        f"Ultralytics' check_cfg rejects; use a smaller target batch, "
        + ("policy none, " if rule.name not in STOCK_IMAGES else "")
        + f"or a lower reference {key}"
        for key in sorted(um.FRACTION_KEYS & passed.keys())
        if not 0.0 <= passed[key] <= 1.0
    ]
    if problems:
        raise ScalingError(problems)


def _auto_pick_warning(ref: ReferenceHyp, opt_ref: str, passed: dict[str, Any]) -> list[str]:
    if opt_ref != "auto" or ref.nc is None or ref.dataset_size is None:
        return []
    name_t, _, _ = um.resolve_auto_optimizer(ref.nc, ref.dataset_size, passed["batch"], passed["nbs"], ref.epochs,
                                             ref.formulas.auto_picks)
    if name_t == passed["optimizer"]:
        return []
    return [f"left on optimizer=auto, Ultralytics would pick {name_t} at the target (batch {passed['batch']}, "
            f"nbs {passed['nbs']}), not the reference's {passed['optimizer']}: another reason it is pinned"]


def _auto_alternative(ref: ReferenceHyp, target: TargetHardware) -> str:
    try:
        auto = scale(ref, target, "auto")
    except ScalingError as e:
        return f"`auto` would refuse: {'; '.join(e.problems)}"
    return (f"`auto` would pass lr0 {fmt(auto.passed['lr0'])} and weight_decay "
            f"{fmt(auto.passed['weight_decay'])} (k = {auto.k:.2f})")
