"""Paired differences of two arms in one cell of the saved trainings: same setup, optimizer, machine kind and
seed, grouped by machine kind (docs/scaling.md 7J point 1). Both the exploration (measured, 7J) and the
confirmation on fresh runs (confirm, 7K) compare arms through here.

A cell's arms: {arm: {(setup, optimizer, machine, seed): row}}, each row a saved training with its `final`
(best.pt's validation) and `curve` (each epoch's)."""

from __future__ import annotations

from collections import defaultdict

from orchestrator.scaling import stats


def score(row: dict, which: str) -> float:
    """best: the validation of best.pt (the bench's `final`); last: the last epoch's validation."""
    return row["final"] if which == "best" else row["curve"][-1]


def device_kind(machine: str) -> str:
    return "gpu" if "NVIDIA" in machine else "cpu"


def compare(arms: dict, a: str, b: str, which: str = "best", kind: str | None = None,
            optimizers: frozenset[str] | None = None) -> stats.Interval | None:
    """arm a minus arm b, paired by (setup, optimizer, machine, seed), grouped by machine kind (7J point 1); on
    one kind of device, or for some optimizers of the family, if given."""
    groups = diffs(arms, a, b, which, kind, optimizers)
    return stats.machine_interval(list(groups.values())) if groups else None


def diffs(arms: dict, a: str, b: str, which: str = "best", kind: str | None = None,
          optimizers: frozenset[str] | None = None) -> dict[str, list[float]]:
    """arm a minus arm b per machine kind, one value per (setup, optimizer, machine, seed) both have."""
    out = defaultdict(list)
    for key, row in arms.get(a, {}).items():
        other = arms.get(b, {}).get(key)
        if other and (kind is None or device_kind(key[2]) == kind) and (optimizers is None or key[1] in optimizers):
            out[key[2]].append(score(row, which) - score(other, which))
    return out
