"""The policies' rules: by how much each multiplies lr0 and the optimizer's weight decay when the
images per optimizer step change, and the reason for each, in one line (docs/scaling.md section 3).

The rules are data (policies.K_RULES: the passed lr0's exponent of k per family); `auto` takes the rule
evidence.decision names for the job's task, start, family and k (docs/scaling.md 7I): the device is
never part of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from orchestrator.scaling import evidence
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.policies import DEVICE_RULE, K_RULES, WARMUP_FROM_K, split_rule
from orchestrator.tasks import MEAN_LOSS_TASKS


@dataclass(frozen=True)
class Rule:
    """What a policy does at this target: the multipliers of the passed lr0 and of the effective
    (optimizer) weight decay, relative to the reference, and the reason for each."""

    name: str  # the policy
    family: str  # "SGD" or "Adam": whether the optimizer's step grows with Ultralytics' summed loss
    k: float  # the factor the rule scales by (ScaleResult.k)
    k_text: str
    lr_mult: Fraction | float
    wd_mult: Fraction | float
    lengthen_warmup: bool
    lr_reason: str
    wd_reason: str
    applies: str = ""  # the rule applied (K_RULES, or "none"): auto's decided one, else the policy's own
    decision: evidence.Decision | None = None  # auto's, with the evidence row it rests on
    detail: str = ""  # what the rule does to the step Ultralytics really takes (plan --explain)

    @property
    def rows_rule(self) -> str:
        """The arm whose measured rows are this rule's."""
        return self.applies or self.name


def power(k: Fraction, e: float) -> Fraction | float:
    """k ** e, exact for the integer exponents."""
    return k ** int(e) if e == int(e) else float(k) ** e


def rule_for(policy: str, opt: str, images: int, images_ref: int, world: int, world_ref: int,
             growth: Fraction | None = None, task: str = "detect", start: str = "scratch") -> Rule:
    """The policy's rule (_rule) with what it does to the optimizer's real step (step_detail)."""
    growth = Fraction(images, images_ref) if growth is None else growth
    rule = _rule(policy, opt, images, images_ref, world, world_ref, growth, task, start)
    if images != images_ref or growth != 1:
        rule = replace(rule, detail=step_detail(opt, rule, float(Fraction(images, images_ref)), float(growth),
                                                task in MEAN_LOSS_TASKS))
    return rule


def step_detail(opt: str, rule: Rule, k: float, growth: float, mean_loss: bool) -> str:
    """Why (or whether) the step grows with the batch at a fixed lr0, and what the rule's lr0 makes of it."""
    lr = float(rule.lr_mult)
    if rule.family == "Adam":
        return (f"lr0: the {opt} update ignores the gradient's scale, so lr0 x {lr:.4g} makes each step x {lr:.4g} "
                f"and, with {k:.4g} x fewer steps, the movement per epoch x {lr / k:.4g}")
    if mean_loss:
        return (f"lr0: Ultralytics' classify loss is a mean per micro-batch, multiplied by the world size under DDP and "
                f"added up over accumulation: the {opt} step grows with the micro-batches per step (x {growth:.4g}); "
                f"lr0 x {lr:.4g} makes the mean-gradient step x {lr * growth:.4g}")
    return (f"lr0: Ultralytics' summed loss grows the {opt} gradient with the images per step (x {growth:.4g}), but "
            f"its clip at norm {um.CLIP_MAX_NORM:g} bound on {evidence.CLIP_BOUND}: the step is lr0 x "
            f"{um.CLIP_MAX_NORM:g} long, so lr0 x {lr:.4g} makes the clipped step x {lr:.4g} and the movement per "
            f"epoch x {lr / k:.4g}")


def _rule(policy: str, opt: str, images: int, images_ref: int, world: int, world_ref: int,
          growth: Fraction, task: str, start: str) -> Rule:
    """The policy's rule for optimizer ``opt`` when images per optimizer step go images_ref -> images.

    A k-rule passes lr0 x k**e (K_RULES, per family: Ultralytics' summed loss already grows the SGD
    gradient k-fold, an Adam-family update ignores its scale) and gives the optimizer a weight decay
    x k**(1-e), which keeps the weight decay per epoch (optimizer steps x lr0 x weight decay).
    `growth` is by how much the SGD step grows at a fixed lr0 (scaler._step_growth): the images per step
    for a summed loss; for classify's mean loss the micro-batches per step, so lr0 is divided by it on top.
    """
    k_images = Fraction(images, images_ref)
    family = "SGD" if opt in um.SGD_FAMILY else "Adam"
    k_text = f"k = {images}/{images_ref} = {float(k_images):.4g} images per step"
    if policy == DEVICE_RULE:
        return _table(family, world, world_ref, growth)
    decision = evidence.decision(task, start, family, float(k_images)) if policy == "auto" else None
    applies = decision.rule if decision else policy  # the arm, e.g. "linear (warmup kept)"
    base, keep_warmup = split_rule(applies)
    if base == "none":
        return _none(policy, family, k_images, growth, k_text, decision)
    e = K_RULES[base][family]
    sgd, mean_loss = family == "SGD", task in MEAN_LOSS_TASKS
    lr_mult, wd_mult = _multipliers(k_images, e, e + 1 if sgd else e, growth if sgd and mean_loss else None)
    k = float(k_images)
    how = (f"lr0 x {float(lr_mult):.4g} = k^{e + 1:g} over {float(growth):.4g} micro-batches per step"
           if sgd and mean_loss and growth != 1 else f"lr0 x {float(lr_mult):.4g} = k^{e:g}")
    lr_reason = "" if lr_mult == 1 and k == 1 else _lr_reason(policy, applies, how, k_text, decision)
    wd_reason = f"{policy} keeps the decay per epoch (steps x 1/{k:.4g}, lr0 x {float(lr_mult):.4g})"
    return Rule(policy, family, k, k_text, lr_mult, wd_mult, k >= WARMUP_FROM_K and not keep_warmup, lr_reason,
                wd_reason, applies, decision)


def _none(policy: str, family: str, k_images: Fraction, growth: Fraction, k_text: str,
          decision: evidence.Decision | None) -> Rule:
    """Stock Ultralytics: lr0 kept, its own weight-decay factor batch*accumulate/nbs, the warmup kept."""
    if k_images == 1 and (growth == 1 or family == "Adam"):
        return Rule(policy, family, 1.0, "no scaling", Fraction(1), Fraction(1), False, "", "", "none", decision)
    why = (f"auto takes stock Ultralytics' values here: {decision_text(decision)}" if decision
           else "policy none: stock Ultralytics' values")
    return Rule(policy, family, 1.0, "no scaling", Fraction(1), k_images, False, f"{why}; {k_text}",
                "Ultralytics multiplies weight decay by batch*accumulate/nbs", "none", decision)


def _table(family: str, world: int, world_ref: int, growth: Fraction) -> Rule:
    """The practitioner rule: lr0 and the optimizer's weight decay x the device ratio."""
    d = Fraction(world, world_ref)
    lr_text = "" if d == 1 and growth == 1 else f"table rule lr0 x {float(d):.4g} (k = {world}/{world_ref} devices)"
    return Rule("table", family, float(d), f"k = {world}/{world_ref} = {float(d):.2f} devices", d, d, d > 1, lr_text,
                f"table rule effective weight decay x {float(d):.4g} (k = {world}/{world_ref} devices)", "table")


def _lr_reason(policy: str, applies: str, how: str, k_text: str, decision: evidence.Decision | None) -> str:
    if decision is None:
        return f"{policy} rule (forced by policy): {how}, {k_text}"
    return f"auto takes {applies}, {how}: {decision_text(decision)}"


def decision_text(decision: evidence.Decision) -> str:
    """Why auto takes its rule, with the measured gap it rests on, in one phrase."""
    if decision.row is None:
        return f"the family's default below the measured k ({evidence.SECTION})"
    basis = "beat the default" if decision.basis == "measured" else "the family's default"
    gap = f", {evidence.interval(decision.row['gap']).text()} vs the reference" if decision.row["gap"] else ""
    start = "fine-tuning" if decision.row["start"] == "pretrained" else "from scratch"
    where = f"{start} at k = {decision.k_measured:g}" + (", extrapolated beyond" if decision.extrapolated else "")
    return f"{basis} ({where}{gap}; {evidence.SECTION})"


def _multipliers(k: Fraction, e: float, mean_exp: float, growth: Fraction | None):
    """lr0 x k**e (exact for integer exponents); with a mean loss's `growth` (SGD, classify) the step
    grows with the micro-batches, not with k: lr0 x k**mean_exp / growth. The weight decay gets
    k / lr_mult, which keeps optimizer steps x lr0 x weight decay per epoch."""
    lr_mult = power(k, e)
    if growth is not None:
        lr_mult = power(k, mean_exp) / growth if e == int(e) else float(k) ** mean_exp / float(growth)
    return lr_mult, (k / lr_mult if isinstance(lr_mult, Fraction) else float(k) / lr_mult)
