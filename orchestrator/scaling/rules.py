"""The scaling rules as data: by how much each multiplies the passed lr0 when the images per optimizer
step grow k-fold (lr0 x k**e, per optimizer family), what it does to the optimizer's weight decay and
to the warmup, and how a saved training is named by the rule it trained with (measured.py).

Families: Ultralytics' detection loss is a SUM over the images of a step, so an SGD-family gradient
grows with k at a fixed lr0 (and the clip at norm 10 then binds, docs/scaling-campaigns.md 7G); an Adam-family
update ignores the gradient's scale. Exponents are of the PASSED lr0 in those terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.scaling.ultralytics_math import SGD_FAMILY

# e of the passed lr0 x k**e per family; every k-rule keeps the weight decay per epoch (optimizer
# weight decay x k**(1 - e)) and lengthens a short warmup from k >= 4 (Goyal et al. 2017)
K_RULES = {
    "linear": {"SGD": 0.0, "Adam": 1.0},  # the mean-gradient step x k (Goyal et al. 2017)
    "sqrt": {"SGD": -0.5, "Adam": 0.5},  # the mean-gradient step x sqrt(k) (Malladi et al. 2022 for Adam)
    "lr0-sqrt": {"SGD": 0.5, "Adam": 0.5},  # the clipped SGD step x sqrt(k): auto's rule for SGD before issue #48
    "lr0 x k": {"SGD": 1.0, "Adam": 1.0},  # an early SGD candidate (docs/scaling-campaigns.md 7B)
}
POLICIES = ("auto", "linear", "sqrt", "table", "none")  # what scaling.policy may name
# the policies that take the images per step stock Ultralytics takes with the reference's nbs (the others
# plan them from the reference's: STOCK_IMAGES), the one that scales by the device count (DEVICE_RULE), and
# those whose rule scales by k, the images per step (K_POLICIES)
STOCK_IMAGES = ("table", "none")
DEVICE_RULE = "table"
K_POLICIES = ("auto", "linear", "sqrt")
# the arms a saved training can be: the k-rules, stock Ultralytics, the device-count rule on one process
ARMS = ("none", "linear", "sqrt", "table", "lr0-sqrt", "lr0 x k")
POLICY_ARMS = ("none", "linear", "sqrt", "table")  # what a user can name as scaling.policy besides auto
DEFAULT_RULE = {"SGD": "linear", "Adam": "linear"}  # auto's rule unless the evidence rejects it (measured.py)
# an optimizer the evidence may decide apart from its family (docs/scaling.md 7J point 2), and that family
OWN_KEYS = {"MuSGD": "SGD"}
WARMUP_FROM_K = 4.0  # the k-rules lengthen a shorter warmup to WARMUP_MIN_EPOCHS from this k (Goyal et al. 2017)
WARMUP_MIN_EPOCHS = 5.0  # Goyal et al. 2017: gradual warmup over 5 epochs for large minibatches
WARMUP_KEPT = " (warmup kept)"  # an arm's suffix: a k-rule with the reference's warmup (scaling.warmup: keep)
LONGER = ", "  # "lr0-sqrt, 20 epochs": an arm trained for more epochs than its reference (the bench's label)


@dataclass(frozen=True)
class Arm:
    """What a bench training applied, typed: its rule, whether it kept the reference's warmup (scaling.warmup: keep),
    and the epochs of one trained longer than its reference. `label` is how the saved results and evidence.json
    spell it ("lr0-sqrt (warmup kept)", "linear, 20 epochs"), and `parse` its one reader."""

    rule: str
    keep_warmup: bool = False
    epochs: int | None = None  # a longer run's epochs: what more epochs did, no rule auto can pass

    @property
    def label(self) -> str:
        return (self.rule + (WARMUP_KEPT if self.keep_warmup else "")
                + (f"{LONGER}{self.epochs} epochs" if self.epochs is not None else ""))

    @property
    def longer(self) -> bool:
        return self.epochs is not None

    @classmethod
    def parse(cls, label: str) -> "Arm":
        head, _, tail = label.partition(LONGER)
        epochs = int(tail.removesuffix(" epochs")) if tail else None
        if head.endswith(WARMUP_KEPT):
            return cls(head.removesuffix(WARMUP_KEPT), True, epochs)
        return cls(head, False, epochs)

    def __str__(self) -> str:
        return self.label


# the arms auto can take (policies.Auto): stock Ultralytics, the k-rules it can pass, those with the reference's warmup
AUTO_ARMS = (*(Arm(r) for r in ("none", "linear", "sqrt", "lr0-sqrt")),
             *(Arm(r, keep_warmup=True) for r in ("linear", "sqrt", "lr0-sqrt")))
AUTO_RULES = tuple(a.label for a in AUTO_ARMS)  # as evidence.json spells them


def default_rule(key: str) -> str:
    """The default rule of a family, or of an optimizer with a key of its own (its family's)."""
    return DEFAULT_RULE[OWN_KEYS.get(key, key)]


def family_of(optimizer: str) -> str:
    """"SGD" or "Adam": whether the optimizer's step grows with Ultralytics' summed loss."""
    return "SGD" if optimizer in SGD_FAMILY else "Adam"


def arm_of(family: str, k: float, lr_mult: float, wd_mult: float, warmup_lengthened: bool) -> Arm | None:
    """The arm a training at k trained: from its passed lr0 and optimizer weight decay over the
    reference's and whether its warmup was lengthened; None where no rule gives those values."""
    e = math.log(lr_mult) / math.log(k)
    wd_e = math.log(wd_mult) / math.log(k)
    if abs(e) < 0.05 and abs(wd_e) < 0.05:
        return Arm("table")  # the device count is 1 on one process: lr0 and the optimizer weight decay kept
    if abs(wd_e - (1 - e)) > 0.05:
        return None
    if family == "SGD" and abs(e) < 0.05:  # linear and stock Ultralytics differ only in the warmup
        return Arm("linear" if warmup_lengthened or k < WARMUP_FROM_K else "none")
    if abs(e) < 0.05:
        return Arm("none")
    name = next((name for name, exps in K_RULES.items() if abs(exps[family] - e) < 0.05), "")
    return Arm(name, keep_warmup=k >= WARMUP_FROM_K and not warmup_lengthened) if name else None
