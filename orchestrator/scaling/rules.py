"""The policies' rules: by how much each multiplies lr0 and the optimizer's weight decay when the
images per optimizer step change, and the true reason for each (docs/scaling.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from orchestrator.scaling import evidence
from orchestrator.scaling import ultralytics_math as um
from orchestrator.tasks import MEAN_LOSS_TASKS

WARMUP_MIN_EPOCHS = 5.0  # Goyal et al. 2017: gradual warmup over 5 epochs for large minibatches
WARMUP_K_THRESHOLD = 4.0  # lengthen warmup when images per step grow at least this much
DEVICE_NAMES = {"cpu": "CPU", "cuda": "GPU", "tpu": "TPU", "xla_cpu": "CPU under XLA"}


@dataclass(frozen=True)
class Rule:
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
    measured_as: str = ""  # the rule name of its rows in evidence.GAPS, where not `name` (auto on a device's choice)

    @property
    def rows_rule(self) -> str:
        return self.measured_as or self.name


def power(k: Fraction, e: float) -> Fraction | float:
    """k ** e, exact for the integer exponents."""
    return k ** int(e) if e == int(e) else float(k) ** e


def rule_for(policy: str, opt: str, images: int, images_ref: int, world: int, world_ref: int,
             growth: Fraction | None = None, task: str = "detect", start: str = "scratch", device: str = "") -> Rule:
    """The policy's rule for optimizer ``opt`` when images per optimizer step go images_ref -> images.

    Every k-rule (auto, linear, sqrt) passes lr0 x k**e and gives the optimizer a weight decay x k**(1-e),
    which keeps the weight decay per epoch (optimizer steps x lr0 x weight decay: steps / k). The
    exponent e differs by family because Ultralytics' loss is a SUM over the images of a step: the
    SGD gradient grows with k at a fixed lr0 (mean-gradient lr x k**(e+1)); an Adam-family step
    does not (mean-gradient lr x k**e). linear and sqrt are the literature's rules in mean-gradient
    terms; auto's exponent is the measured one (evidence.AUTO_LR0_EXPONENT). Ultralytics' clip at norm
    10 bound on nearly every measured SGD step (evidence.CLIP_BOUND), so the SGD step's real length is
    lr0 x 10 x 1: the reasons say what each rule does to that clipped step too.

    `growth` is by how much the SGD step grows at a fixed lr0 (scaler._step_growth): the images per step
    for a summed loss; for classify's mean loss (tasks.MEAN_LOSS_TASKS) the micro-batches per step, so there lr0
    is divided by `growth` on top of the rule, which keeps the same mean-gradient step as for detect.
    `start` ("scratch" or "pretrained"): which measurements auto's reason quotes (evidence.gaps).
    `device`: the target's kind; where its rows chose another rule for this optimizer and start
    (evidence.AUTO_BY_DEVICE), auto takes that rule there.
    """
    k_images = Fraction(images, images_ref)
    growth = k_images if growth is None else growth
    mean_loss = task in MEAN_LOSS_TASKS
    sgd = opt in um.SGD_FAMILY
    family = "SGD" if sgd else "Adam"
    k_text = f"k = {images}/{images_ref} = {float(k_images):.2f} images per optimizer step"
    summed = _step_text(opt, sgd, mean_loss, float(growth))
    if policy == "none":
        if k_images == 1 and (growth == 1 or not sgd):
            return Rule("none", family, 1.0, "no scaling", Fraction(1), Fraction(1), False, "", "")
        per_epoch = (
            f"mean-gradient step x {float(growth):.4g}" if sgd and mean_loss
            else f"{float(k_images):.4g} x fewer steps of the same {'clipped ' if sgd else ''}length per epoch"
        )
        return Rule(
            "none", family, 1.0, "no scaling", Fraction(1), k_images, False,
            f"policy none: {summed}: {per_epoch}",
            "policy none: Ultralytics multiplies weight decay by batch*accumulate/nbs",
        )
    if policy == "table":
        d = Fraction(world, world_ref)
        lr_text = f"table rule lr0 x {float(d):.4g} (k = {world}/{world_ref} devices)"
        if sgd and growth != 1:
            lr_text += f"; with Ultralytics' loss scaling the mean-gradient SGD step grows x {float(d * growth):.4g}"
            if not mean_loss:
                lr_text += f" unclipped, x {float(d):.4g} as the clip binds (docs/scaling.md 7G)"
        if d == 1 and growth == 1:
            lr_text = ""
        return Rule(
            "table", family, float(d), f"k = {world}/{world_ref} = {float(d):.2f} devices", d, d, d > 1, lr_text,
            f"table rule effective weight decay x {float(d):.4g} (k = {world}/{world_ref} devices)",
        )
    choice = evidence.device_choice(opt, start, device, float(k_images)) if policy == "auto" else None
    e = _lr0_exponent(policy, family, task, choice)
    mean_exp = e + 1 if sgd else e  # the mean-gradient learning rate grows x k**mean_exp
    lr_mult, wd_mult = _multipliers(k_images, e, mean_exp, growth if sgd and mean_loss else None)
    k = float(k_images)
    if k == 1 and lr_mult == 1:
        lr_reason = ""
    elif k == 1:
        lr_reason = (f"{policy} keeps the reference's step at the same images per step: {summed}, so lr0 x "
                     f"1/{float(growth):.4g} (and the weight decay x {float(growth):.4g}: the same decay per step)")
    elif policy == "auto":
        lr_reason = _auto_reason(opt, family, task, summed, k_text, k, e, mean_exp, growth if mean_loss else None,
                                 start, choice)
    else:
        lr_reason = (
            f"{policy} rule (forced by policy): step x {k ** mean_exp:.4g} = "
            f"{'k' if policy == 'linear' else 'sqrt(k)'} in mean-gradient terms; {summed}, so lr0 x "
            f"{float(lr_mult):.4g}" + (f", which makes the clipped step x {float(lr_mult):.4g} and the movement per "
                                       f"epoch x {float(lr_mult) / k:.4g}" if sgd and not mean_loss else "")
            + f"; {k_text}"
        )
    wd_reason = (
        f"{policy} rule keeps the weight decay per epoch (optimizer steps x lr0 x weight decay: "
        f"steps x 1/{k:.4g}, lr0 x {float(lr_mult):.4g}, weight decay x {float(wd_mult):.4g})"
    )
    return Rule(policy, family, k, k_text, lr_mult, wd_mult, k >= WARMUP_K_THRESHOLD, lr_reason, wd_reason,
                choice.rule if choice else "")


def _lr0_exponent(policy: str, family: str, task: str, choice: evidence.DeviceChoice | None) -> float:
    """The passed lr0's exponent of k: auto's measured one, else (a device's choice for auto, or the
    policy) the literature's rule in mean-gradient terms, linear x k or sqrt x sqrt(k), less the summed
    loss's x k for the SGD family."""
    if policy == "auto" and choice is None:
        return evidence.auto_exponent(family, task)
    return (1.0 if (choice.rule if choice else policy) == "linear" else 0.5) - (1.0 if family == "SGD" else 0.0)


def _auto_reason(opt: str, family: str, task: str, summed: str, k_text: str, k: float, e: float, mean_exp: float,
                 mean_loss_growth: Fraction | None, start: str = "scratch",
                 choice: evidence.DeviceChoice | None = None) -> str:
    """auto's lr0 reason: what its exponent does to the step and the movement per epoch, and the rows
    that chose it. An SGD step under a summed loss is clipped (evidence.CLIP_BOUND): its length follows lr0."""
    how = f"{summed}; lr0 x k^{e:g}"
    step = f"step x {k ** mean_exp:.4g} in mean-gradient terms, movement per epoch x {k ** (mean_exp - 1):.4g}"
    if family == "Adam":
        how += {0.5: ", the square-root rule (Malladi et al. 2022)", 1.0: ", the linear rule"}.get(e, "")
    elif mean_loss_growth is not None:
        how = f"{summed}; lr0 x k^{mean_exp:g} / {float(mean_loss_growth):.4g}"
    else:
        how += {0.5: ", the square-root rule for a normalised step", 1.0: ", the linear rule"}.get(e, "")
        step = f"the clipped step x {k ** e:.4g}, movement per epoch x {k ** (e - 1):.4g}"
    if choice is not None:  # named after the branch's own lr0 text (classify's divides by the micro-batches)
        how += f", the {choice.rule} rule in mean-gradient terms"
    head = f"auto ({family}-family {opt}): {how}: {step} ({k:.4g} x fewer optimizer steps); {k_text}; "
    if choice is None:
        return head + _measured_text(opt, family, k, task, start)
    return head + (f"on a {DEVICE_NAMES[choice.device]} from k = {choice.k_from} auto takes {choice.rule}'s rule, "
                   f"the best of the rows measured there: {evidence.choice_text(choice)}"
                   + (f"; {auto_basis(k, family, start, opt)}" if k > choice.k_from else ""))


def _measured_text(opt: str, family: str, k: float, task: str, start: str) -> str:
    """What was measured for auto at this k: this start's rows (from scratch, or fine-tuning), else
    what the other start measured, said as such after what this start's evidence covers."""
    measured = evidence.gaps(family, k, "auto", task, start, opt)
    if measured and all(row.start == start for row in measured):
        return f"measured{' when fine-tuning' if start == 'pretrained' else ''}: {evidence.gaps_text(measured)}"
    other = "when fine-tuning" if start == "scratch" else "from scratch"
    return auto_basis(k, family, start, opt) + (f"; measured {other}: {evidence.gaps_text(measured)}"
                                                if measured else "")


def _multipliers(k: Fraction, e: float, mean_exp: float, growth: Fraction | None):
    """lr0 x k**e (exact for integer exponents); with a mean loss's `growth` (SGD, classify) the step
    grows with the micro-batches, not with k: lr0 x k**mean_exp / growth. The weight decay gets
    k / lr_mult, which keeps optimizer steps x lr0 x weight decay per epoch."""
    lr_mult = power(k, e)
    if growth is not None:
        lr_mult = power(k, mean_exp) / growth if e == int(e) else float(k) ** mean_exp / float(growth)
    return lr_mult, (k / lr_mult if isinstance(lr_mult, Fraction) else float(k) / lr_mult)


def _step_text(opt: str, sgd: bool, mean_loss: bool, growth: float) -> str:
    """Why (or whether) the optimizer's step grows with the batch at a fixed lr0."""
    if not sgd:
        return f"the {opt} update ignores the gradient's scale, so Ultralytics' loss scaling changes nothing"
    if mean_loss:
        return (f"Ultralytics' classify loss is a mean per micro-batch, multiplied by the world size under DDP and "
                f"added up over accumulation, so the {opt} step grows with the micro-batches per optimizer step "
                f"(world x accumulate: x {growth:.4g})")
    return (f"Ultralytics' summed loss grows the {opt} gradient with the images per step (x {growth:.4g}), but "
            f"its clip at norm {um.CLIP_MAX_NORM:g} bound on {evidence.CLIP_BOUND}: the step stays lr0 x "
            f"{um.CLIP_MAX_NORM:g} long")


def auto_basis(k: float, family: str = "SGD", start: str = "scratch", opt: str = "") -> str:
    """Where auto stands at a k its start (from scratch, or fine-tuning) has no row for."""
    top, measured = evidence.measured_max_k(family, start, opt)
    when = " when fine-tuning" if start == "pretrained" else " from scratch"
    if k > top:
        return f"beyond the measured k <= {top}{when} ({measured}), extrapolated (docs/scaling.md section 7)"
    return f"not measured at this k{when} (docs/scaling.md section 7)"
