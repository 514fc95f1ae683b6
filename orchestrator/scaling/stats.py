"""Statistics that fit the seed noise: the mean of paired differences (same seed, same machine) and its
95 % interval (Student's t). Pure python: `plan` quotes what `measured` computed with it."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

# Student's t, two-sided 95 % (0.975 quantile) for 1..30 degrees of freedom; beyond, 1.96 + 2.4 / df
# (within 0.002 of the exact value from 31 on)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df


@dataclass(frozen=True)
class Interval:
    """The mean of n values and its 95 % interval (none for n = 1: one pair says nothing of the noise)."""

    n: int
    mean: float
    lo: float | None
    hi: float | None

    @property
    def excludes_zero(self) -> bool:
        return self.lo is not None and (self.lo > 0 or self.hi < 0)

    def text(self) -> str:
        """'+0.021 [-0.004, +0.046], n = 8' (the interval left out for one pair)."""
        where = f" [{self.lo:+.3f}, {self.hi:+.3f}]" if self.lo is not None else ""
        return f"{self.mean:+.3f}{where}, n = {self.n}"

    @classmethod
    def from_json(cls, d: dict) -> Interval:
        """The interval as_json wrote (evidence.json, a bench's summary)."""
        return cls(d["n"], d["mean"], *(d["ci95"] or (None, None)))

    def as_json(self) -> dict:
        return {"n": self.n, "mean": round(self.mean, 4),
                "ci95": None if self.lo is None else [round(self.lo, 4), round(self.hi, 4)]}


def mean_interval(values: list[float]) -> Interval:
    """The mean and its 95 % t-interval."""
    n, mean = len(values), statistics.fmean(values)
    if n < 2:
        return Interval(n, mean, None, None)
    half = t975(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(n, mean, mean - half, mean + half)


def difference_interval(a: list[float], b: list[float]) -> Interval:
    """mean(a) - mean(b) for two independent samples, with Welch's 95 % interval: the interaction test
    (is a paired difference on one kind of device another than on the other?)."""
    mean = statistics.fmean(a) - statistics.fmean(b)
    if len(a) < 2 or len(b) < 2:
        return Interval(len(a) + len(b), mean, None, None)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(len(a) + len(b), mean, mean, mean)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t975(max(1, int(df))) * se
    return Interval(len(a) + len(b), mean, mean - half, mean + half)
