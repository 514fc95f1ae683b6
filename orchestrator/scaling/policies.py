"""The policies, each an object that decides its rule: by how much the passed lr0 and the optimizer's
weight decay are multiplied when the images per optimizer step change, whether the warmup is
lengthened, and (for `auto`) the evidence row it rests on. The decision is a typed record (`Rule`);
advice.py renders every reason and warning from it (docs/scaling.md section 3).

The rules are data (rules.K_RULES: the passed lr0's exponent of k per family); `auto` takes the rule
evidence.decision names for the job's task, start, family and k (docs/scaling.md 7I): the device is
never part of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Protocol

from orchestrator.scaling import evidence
from orchestrator.scaling.rules import DEVICE_RULE, K_RULES, POLICIES, WARMUP_FROM_K, Arm, family_of
from orchestrator.tasks import MEAN_LOSS_TASKS


@dataclass(frozen=True)
class Target:
    """What a policy decides from: the optimizer, the images per step (reference -> target), the device
    counts, by how much the SGD step grows at a fixed lr0 (scaler._step_growth), the task and the start."""

    opt: str
    images: int
    images_ref: int
    world: int
    world_ref: int
    growth: Fraction
    task: str = "detect"
    start: str = "scratch"

    @property
    def family(self) -> str:
        return family_of(self.opt)

    @property
    def k_images(self) -> Fraction:
        return Fraction(self.images, self.images_ref)

    @property
    def mean_loss(self) -> bool:
        return self.task in MEAN_LOSS_TASKS


@dataclass(frozen=True)
class Rule:
    """A policy's decision at one target: the multipliers of the passed lr0 and of the effective
    (optimizer) weight decay relative to the reference, the warmup, and what it rests on."""

    name: str  # the policy
    target: Target
    k: float  # the factor the rule scales by (ScaleResult.k): images per step, or devices for `table`
    lr_mult: Fraction | float
    wd_mult: Fraction | float
    lengthen_warmup: bool
    applies: Arm  # the arm applied: auto's decided one, else the policy's own
    exponent: float | None = None  # the passed lr0's exponent of k (k-rules)
    decision: evidence.Decision | None = None  # auto's, with the evidence row it rests on

    @property
    def family(self) -> str:
        return self.target.family

    @property
    def stock(self) -> bool:
        """Stock Ultralytics' values: policy none, or auto where the evidence chose them."""
        return self.applies.rule == Stock.name


def power(k: Fraction, e: float) -> Fraction | float:
    """k ** e, exact for the integer exponents."""
    return k ** int(e) if e == int(e) else float(k) ** e


class Policy(Protocol):
    """Every policy decides the same way: a Rule from the target alone (its own settings, such as a k-rule's
    exponent or whether it keeps the warmup, are the object's)."""

    name: str

    def decide(self, t: Target) -> Rule: ...


class Stock:
    """`none`: stock Ultralytics: lr0 kept, its own weight-decay factor batch*accumulate/nbs, the warmup kept."""

    name = "none"

    def decide(self, t: Target) -> Rule:
        same = t.k_images == 1 and (t.growth == 1 or t.family == "Adam")
        return Rule(self.name, t, 1.0, Fraction(1), Fraction(1) if same else t.k_images, False, Arm(self.name), None)


class DeviceCount:
    """`table`, the practitioner rule: lr0 and the optimizer's weight decay x the device ratio."""

    name = DEVICE_RULE

    def decide(self, t: Target) -> Rule:
        d = Fraction(t.world, t.world_ref)
        return Rule(self.name, t, float(d), d, d, d > 1, Arm(self.name))


class KRule:
    """A k-rule (`linear`, `sqrt`, and auto's `lr0-sqrt`): lr0 x k**e (K_RULES, per family) and the
    optimizer's weight decay x k**(1-e), which keeps the weight decay per epoch; the warmup lengthened from
    k = 4 unless the arm keeps the reference's (`keep_warmup`). Classify's mean loss: lr0 also / its
    micro-batch growth."""

    def __init__(self, name: str, keep_warmup: bool = False):
        self.name, self.keep_warmup = name, keep_warmup

    def decide(self, t: Target) -> Rule:
        e = K_RULES[self.name][t.family]
        sgd = t.family == "SGD"
        lr_mult, wd_mult = _multipliers(t.k_images, e, e + 1 if sgd else e, t.growth if sgd and t.mean_loss else None)
        k = float(t.k_images)
        return Rule(self.name, t, k, lr_mult, wd_mult, k >= WARMUP_FROM_K and not self.keep_warmup,
                    Arm(self.name, self.keep_warmup), e)


class Auto:
    """`auto`: the rule the evidence decided for the task, start, family and k (evidence.decision), decided
    by that rule's own policy and recorded as auto's, with the decision it rests on."""

    name = "auto"

    def decide(self, t: Target) -> Rule:
        decision = evidence.decision(t.task, t.start, t.family, float(t.k_images), t.opt)
        arm = decision.arm
        chosen: Policy = Stock() if arm.rule == Stock.name else KRule(arm.rule, arm.keep_warmup)
        return replace(chosen.decide(t), name=self.name, decision=decision)


REGISTRY: dict[str, Policy] = {p.name: p for p in (Auto(), KRule("linear"), KRule("sqrt"), DeviceCount(), Stock())}
assert tuple(sorted(REGISTRY)) == tuple(sorted(POLICIES)), "every policy the job spec accepts has its object"


def rule_for(policy: str, opt: str, images: int, images_ref: int, world: int, world_ref: int,
             growth: Fraction | None = None, task: str = "detect", start: str = "scratch") -> Rule:
    """The policy's decision for optimizer ``opt`` when images per optimizer step go images_ref -> images."""
    growth = Fraction(images, images_ref) if growth is None else growth
    return REGISTRY[policy].decide(Target(opt, images, images_ref, world, world_ref, growth, task, start))


def _multipliers(k: Fraction, e: float, mean_exp: float, growth: Fraction | None):
    """lr0 x k**e (exact for integer exponents); with a mean loss's `growth` (SGD, classify) the step
    grows with the micro-batches, not with k: lr0 x k**mean_exp / growth. The weight decay gets
    k / lr_mult, which keeps optimizer steps x lr0 x weight decay per epoch."""
    lr_mult = power(k, e)
    if growth is not None:
        lr_mult = power(k, mean_exp) / growth if e == int(e) else float(k) ** mean_exp / float(growth)
    return lr_mult, (k / lr_mult if isinstance(lr_mult, Fraction) else float(k) / lr_mult)

