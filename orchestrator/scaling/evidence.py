"""What the scaling-fidelity benchmarks measured, as `auto` and the plan read it: evidence.json, which
`python -m orchestrator.scaling.measured --write` builds from the saved results (docs/img/bench_*.json)
by the procedures of docs/scaling.md section 7 (7J explores every saved run, 7K confirms on fresh ones).
No number here is typed by hand: a test fails when the saved results and evidence.json disagree.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from orchestrator.scaling.confirm import CONFIRMED, REJECTED
from orchestrator.scaling.rules import AUTO_RULES, DEFAULT_RULE, OWN_KEYS, Arm, default_rule
from orchestrator.scaling.stats import Interval

EVIDENCE = Path(__file__).with_name("evidence.json")
KEPT_GAP = 0.02  # within this of the reference's mean final mAP50-95, a policy "kept" the outcome (issue #33)
METRICS = {"classify": "top-1", "segment": "mask mAP50-95", "semantic": "mIoU", "depth": "delta1"}
SECTION = "docs/scaling.md 7J, 7K"
@functools.cache
def load() -> dict:
    return json.loads(EVIDENCE.read_text())


def forget() -> None:
    """Read evidence.json again at the next look (measured --write has just written it)."""
    load.cache_clear()
    gaps_all.cache_clear()


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


def rows_at(family: str, k: float, start: str, task: str = "detect", optimizer: str | None = None) -> list[Gap]:
    """Every arm's gap at this k from this start (the task's own rows, else detect's); an optimizer with a key
    of its own (7J point 2) takes its own rows where the evidence made them."""
    def at(key: str) -> list[Gap]:
        return _task_rows([g for g in gaps_all() if (g.family, g.start) == (key, start) and abs(g.k - k) < 1e-9], task)
    return (at(optimizer) if OWN_KEYS.get(optimizer) == family else []) or at(family)


def _task_rows(rows: list, task: str, task_of=lambda row: row.task) -> list:
    """The task's own rows, else detect's: a task without measurements of its own takes detect's (the
    procedure's step 5)."""
    return [r for r in rows if task_of(r) == task] or [r for r in rows if task_of(r) == "detect"]


def gaps_text(rows: list[Gap]) -> str:
    return "; ".join(row.text() for row in rows)


@dataclass(frozen=True)
class Decision:
    """auto's rule at a target's k: the measured row it follows (k_measured), and how (basis); for an optimizer
    that may have a key of its own (MuSGD), whether that row is its own (`pooled`: how it is not)."""

    arm: Arm
    basis: str  # confirm.CONFIRMED, REJECTED, AWAITING, "default", "default, not measured here"
    k_measured: float | None  # the measured k whose row this is; None below every measured k
    extrapolated: bool
    row: dict | None
    pooled: str | None = None  # "not measured for MuSGD", "pooled with SGD": why MuSGD takes its family's row


def decision(task: str, start: str, family: str, k: float, optimizer: str | None = None) -> Decision:
    """auto's rule by the procedure's step 5: the task's own rows, else detect's; below the smallest
    measured k the default, between two the lower one's rule, beyond the largest its rule (extrapolated).
    An optimizer with a key of its own (7J point 2) takes its own row where the evidence made one."""
    rows = _task_rows([d for d in load()["decisions"] if (d["start"], d["family"]) == (start, family)], task,
                      lambda d: d["task"])
    own = optimizer if OWN_KEYS.get(optimizer) == family else None
    if own:
        mine = {(d["task"], d["k"]): d for d in load()["decisions"] if (d["start"], d["family"]) == (start, own)}
        rows = [mine.get((d["task"], d["k"]), d) for d in rows]
    below = [d for d in rows if d["k"] <= k + 1e-9]
    if not below:
        return Decision(Arm(DEFAULT_RULE[family]), "default, below the measured k", None, False, None)
    row = max(below, key=lambda d: d["k"])
    return Decision(Arm.parse(row["rule"]), row["basis"], row["k"], k > max(d["k"] for d in rows) + 1e-9, row,
                    _pooled(own, row))


def _pooled(own: str | None, row: dict) -> str | None:
    """Why an optimizer with a key of its own follows its family's row here (None: its own row, or no such
    optimizer)."""
    if own is None or row["family"] == own:
        return None
    if "musgd" in row:
        why = "no hypothesis of its own declared here" if row["musgd"]["own_key"] else "its own pairs here did not differ"
        return f"pooled with {row['family']}: {why} ({SECTION})"
    return f"not measured for {own} here: the {row['family']} family's row"


def basis_text(row: dict) -> str:
    """What decided a row, in one phrase (the plan's reason and the first page quote it): the fresh pairs that
    confirmed or rejected its hypothesis (7K), 7J's choice while it awaits them, or the prior with what 7J's
    exploration of every saved run found beside it."""
    default = default_rule(row["family"])
    c = row.get("confirmation")
    if c is None:
        return "the family's default" + _nearest_alternative(row) + (
            f"; 7J alone would pass {row['explored']}" if "explored" in row else "")
    fresh = f"{c['hypothesis']} - {c['versus']} {Interval.from_json(c['best']).text()}" if c["best"] else ""
    if row["basis"] == CONFIRMED:
        return f"confirmed on fresh runs ({fresh})"
    if row["basis"] == REJECTED:
        prior = "the family's default" if row["rule"] == default else f"the {OWN_KEYS[row['family']]} row's rule"
        return f"{prior}: {c['hypothesis']} failed on fresh runs ({fresh})"
    seen = Interval.from_json(row["versus"][c["hypothesis"]]).text() if c["hypothesis"] in row["versus"] else "-"
    return (f"awaiting confirmation on fresh runs ({fresh or 'none yet'}); 7J's choice from trainings mostly seen "
            f"before any declaration ({c['hypothesis']} - {c['versus']} {seen})")


def _nearest_alternative(row: dict) -> str:
    """'; in 7J's exploration no alternative beat it (X - default ...)': the one auto could pass with the
    largest lower bound."""
    passable = {a: Interval.from_json(v) for a, v in row["versus"].items() if a in AUTO_RULES}
    if not passable:
        return ""
    alt, iv = max(passable.items(), key=lambda item: (item[1].lo is not None, item[1].lo or 0.0))
    return f"; in 7J's exploration no alternative beat it ({alt} - {default_rule(row['family'])} {iv.text()})"


def longer(start: str, family: str, k: float) -> list[Gap]:
    """Where a rule trained for more epochs than the reference was measured at this k, its gap."""
    return [g for g in gaps_all() if (g.start, g.family) == (start, family) and abs(g.k - k) < 1e-9
            and g.arm.longer and g.task == "detect"]


def clip_bound() -> str:
    """How often Ultralytics' clip at norm 10 bound, as measured per training (worker/grad_norm.py; the
    `clipping` of each saved run)."""
    return clip_text(load()["figures"]["clip"])


def clip_text(c: dict) -> str:
    """'98.5%-100% of the steps in each of the 132 SGD-family detect trainings measured at 8 to 64 images per
    step, ...' from evidence.json's figures (measured._clip)."""
    lo, hi = c["images_per_step"]
    return (f"{c['min']:.1%}-{c['max']:.0%} of the steps in each of the {c['trainings']} SGD-family detect trainings "
            f"measured at {lo} to {hi} images per step, from scratch and fine-tuning (docs/scaling-campaigns.md 7G, 7H)")


def kept_with_steps() -> int:
    """The fewest optimizer steps in all with which auto's rule kept a detect reference from scratch."""
    return load()["figures"]["kept_with_steps"]


DIP_SHARE = 0.5  # an early dip worth a warning: the first epochs' best below half the reference's at that epoch


def finetune_dip(k: float) -> str | None:
    """Where Adam-family fine-tuning at the measured k at or below this one stayed far below the reference in
    its first epochs (the warmup the k-rules lengthen), what was measured; None where it did not."""
    d = load()["figures"]["finetune_dip"]
    measured = [int(m) for m in d["by_k"] if int(m) <= k + 1e-9]
    if not measured:
        return None
    at = d["by_k"][str(max(measured))]
    if at["max"] >= DIP_SHARE * d["reference"]:
        return None
    return (f"fine-tuning with AdamW at k = {max(measured)}, auto's rule's validation mAP50-95 stayed at or below "
            f"{at['max']:.2f} in the first {d['epochs']} epochs of each of {at['trainings']} trainings, while the "
            f"reference's was {d['reference']:.2f} at epoch {d['epochs']} (docs/scaling-campaigns.md 7H)")


def few_steps() -> dict:
    """The few-step regime (docs/scaling-campaigns.md 7C): AdamW auto at k = 4 on 256 images, its optimizer steps in
    all, the reference's mean and auto's at 4x the epochs."""
    return load()["few_steps"]

