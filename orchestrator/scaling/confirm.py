"""docs/scaling.md 7K: each departure from the default that 7J took, as of 7K's declaration, from trainings mostly
seen before any procedure was written down (the hypotheses), stands or falls on fresh runs alone: the result
files first committed after that declaration. Every other cell takes the prior, its family's default, and no
result file decides it; what 7J's exploration of every saved run found is kept beside each decision.
"""

from __future__ import annotations

from orchestrator.scaling.pairing import compare
from orchestrator.scaling.rules import DEFAULT_RULE, OWN_KEYS

MIN_PAIRS = 6  # fresh seed pairs a hypothesis needs before it is judged (7K point 4)
AWAITING, CONFIRMED, REJECTED = "awaiting confirmation", "confirmed", "rejected"


def apply(explored: list[dict], pairs: dict, fresh: dict, hypotheses: dict) -> list[dict]:
    """auto's rule per cell by 7K, from 7J's decisions on every saved run (`explored`), the pairs of every saved
    run (`pairs`, for the gap to the reference) and of the fresh runs alone (`fresh`), both keyed like
    measured._pairs. An optimizer with a key of its own (MuSGD) has its family's cell as its prior, so the
    families are decided first."""
    decided: dict[tuple, dict] = {}
    for d in sorted(explored, key=lambda d: d["family"] in OWN_KEYS):
        cell = _cell(d)
        family_cell = (d["task"], d["start"], OWN_KEYS.get(d["family"], d["family"]), d["k"])
        prior = decided[family_cell]["rule"] if family_cell in decided else DEFAULT_RULE[family_cell[2]]
        opts = dict(views(family_cell, hypotheses))[d["family"]]
        row = {k: v for k, v in d.items() if k != "on_last"}  # 7J's last-epoch note: 7K's own below
        if cell in hypotheses:
            row.update(_judge(hypotheses[cell], fresh.get(family_cell, {}), DEFAULT_RULE[family_cell[2]], prior, opts))
        else:
            row.update(rule=prior, basis=d["basis"] if d["rule"] == prior else "default")
        if d["rule"] != row["rule"]:
            row["explored"] = d["rule"]  # what 7J alone would pass here
        gap = compare(pairs.get(family_cell, {}), row["rule"], "reference", optimizers=opts)
        row["gap"] = gap.as_json() if gap else None
        decided[cell] = row
    return [decided[_cell(d)] for d in explored]


def _cell(row: dict) -> tuple:
    return row["task"], row["start"], row["family"], row["k"]


def views(cell: tuple, hypotheses: dict) -> list[tuple[str, frozenset[str] | None]]:
    """The keys a family's cell (task, start, family, k) is decided under, each with the optimizers whose pairs
    it takes: the family pooled, or, where an optimizer with a key of its own holds a hypothesis there (7K point
    2; 7J point 2 found it), the family's own optimizer and that one apart."""
    task, start, fam, k = cell
    own = [o for o, of in OWN_KEYS.items() if of == fam and (task, start, o, k) in hypotheses]
    if not own:
        return [(fam, None)]
    return [(fam, frozenset({fam})), *((o, frozenset({o})) for o in own)]


def _judge(hypothesis: str, arms: dict, default: str, prior: str, opts: frozenset[str] | None) -> dict:
    """7K point 4: the hypothesis stands where at least MIN_PAIRS fresh pairs put it above the default with an
    interval above 0 (best.pt); it falls to the prior where they do not; with fewer pairs it waits, and keeps
    7J's choice meanwhile. The last epoch's verdict is shown where it would differ."""
    best = compare(arms, hypothesis, default, optimizers=opts)
    last = compare(arms, hypothesis, default, "last", optimizers=opts)
    status = AWAITING if best is None or best.n < MIN_PAIRS else CONFIRMED if best.above_zero else REJECTED
    row = {"rule": prior if status == REJECTED else hypothesis, "basis": status,
           "confirmation": {"hypothesis": hypothesis, "versus": default, "best": best.as_json() if best else None,
                            "last": last.as_json() if last else None}}
    if status != AWAITING and last.above_zero != best.above_zero:
        row["on_last"] = {"rule": hypothesis if last.above_zero else prior, "versus": last.as_json()}
    return row
