"""What the scaling-fidelity benchmarks measured, as `auto` and the plan read it: evidence.json, which
`python -m orchestrator.scaling.measured --write` builds from the saved results (docs/img/bench_*.json)
by the procedure of docs/scaling.md section 7I. No number here is typed by hand: a test fails when the
saved results and evidence.json disagree.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.scaling.rules import DEFAULT_RULE, Arm
from orchestrator.scaling.stats import Interval

EVIDENCE = Path(__file__).with_name("evidence.json")
KEPT_GAP = 0.02  # within this of the reference's mean final mAP50-95, a policy "kept" the outcome (issue #33)
METRICS = {"classify": "top-1", "segment": "mask mAP50-95", "semantic": "mIoU", "depth": "delta1"}
SECTION = "docs/scaling.md 7I"
# Ultralytics clips the gradient norm at 10 before every step. Measured per epoch over whole trainings
# (worker/grad_norm.py; detect, SGD, yolo11n, 2048 images at 64 px; the `clipping` of each saved run):
# it bound on 96-100 % of the steps at 8 images per step and on every step at 64, fine-tuning included.
CLIP_BOUND = ("96-100 % of the steps measured at 8 to 64 images per step (SGD, detect, from scratch and fine-tuning; "
              "docs/scaling.md 7G, 7H)")
FINETUNE_DIP = ("fine-tuning with AdamW at k = 4 and 8, every policy's validation mAP50-95 stayed at 0-0.3 for the first "
                "5-6 epochs (under warmup) while the reference's rose to 0.5, and caught up after")


@functools.cache
def load() -> dict:
    return json.loads(EVIDENCE.read_text())


@dataclass(frozen=True)
class Gap:
    """One arm's paired difference to the reference at (task, start, family, k), pooled over machines."""

    family: str  # "SGD" (SGD-family) or "Adam" (Adam-family)
    k: float
    arm: Arm  # a rule (rules.ARMS), with the reference's warmup or not, or one trained for more epochs
    gap: Interval
    task: str = "detect"
    start: str = "scratch"  # "scratch" (from a model yaml) or "pretrained" (fine-tuning given weights)

    def text(self) -> str:
        return f"{self.arm.label} {self.gap.text()} {METRICS.get(self.task, 'mAP50-95')} at k = {self.k:g} ({SECTION})"


@functools.cache
def gaps_all() -> tuple[Gap, ...]:
    return tuple(Gap(c["family"], c["k"], Arm.parse(c["arm"]), Interval.from_json(c["best"]), c["task"], c["start"])
                 for c in load()["comparisons"] if c["versus"] == "reference")


def gaps(family: str, k: float, rule: str, task: str = "detect", start: str = "scratch") -> list[Gap]:
    """The rule's gap to the reference at this (integer) k for the family: the task's own, else detect's;
    the start's own, else the other start's (whose text says which)."""
    rows = _task_rows([g for g in gaps_all() if (g.family, g.arm.label) == (family, rule) and abs(g.k - k) < 1e-9], task)
    return [g for g in rows if g.start == start] or rows


def rows_at(family: str, k: float, start: str, task: str = "detect") -> list[Gap]:
    """Every arm's gap at this k from this start (the task's own rows, else detect's)."""
    return _task_rows([g for g in gaps_all() if (g.family, g.start) == (family, start) and abs(g.k - k) < 1e-9], task)


def _task_rows(rows: list, task: str, task_of=lambda row: row.task) -> list:
    """The task's own rows, else detect's: a task without measurements of its own takes detect's (the
    procedure's step 5)."""
    return [r for r in rows if task_of(r) == task] or [r for r in rows if task_of(r) == "detect"]


def gaps_text(rows: list[Gap]) -> str:
    return "; ".join(row.text() for row in rows)


@dataclass(frozen=True)
class Decision:
    """auto's rule at a target's k: the measured row it follows (k_measured), and how (basis)."""

    arm: Arm
    basis: str  # "measured", "default", "default, not measured here"
    k_measured: float | None  # the measured k whose row this is; None below every measured k
    extrapolated: bool
    row: dict | None


def decision(task: str, start: str, family: str, k: float) -> Decision:
    """auto's rule by the procedure's step 5: the task's own rows, else detect's; below the smallest
    measured k the default, between two the lower one's rule, beyond the largest its rule (extrapolated)."""
    rows = _task_rows([d for d in load()["decisions"] if (d["start"], d["family"]) == (start, family)], task,
                      lambda d: d["task"])
    below = [d for d in rows if d["k"] <= k + 1e-9]
    if not below:
        return Decision(Arm(DEFAULT_RULE[family]), "default, below the measured k", None, False, None)
    row = max(below, key=lambda d: d["k"])
    return Decision(Arm.parse(row["rule"]), row["basis"], row["k"], k > max(d["k"] for d in rows) + 1e-9, row)


def longer(start: str, family: str, k: float) -> list[Gap]:
    """Where a rule trained for more epochs than the reference was measured at this k, its gap."""
    return [g for g in gaps_all() if (g.start, g.family) == (start, family) and abs(g.k - k) < 1e-9
            and g.arm.longer and g.task == "detect"]


def few_steps() -> dict:
    """The few-step regime (docs/scaling.md 7C): AdamW auto at k = 4 on 256 images, its optimizer steps in
    all, the reference's mean and auto's at 4x the epochs."""
    return load()["few_steps"]

