"""Statistics that fit the seed noise: the mean of paired differences (same seed, same machine) and its
95 % interval: Student's t on one machine kind, DerSimonian and Laird's random effects over several
(docs/scaling.md 7J: pairs from one machine kind are not independent of each other, and machine kinds
differ more than seeds do). Pure python: `plan` quotes what `measured` computed with it."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace

# Student's t, two-sided 95 % (0.975 quantile) for 1..30 degrees of freedom; beyond, 1.96 + 2.4 / df
# (within 0.002 of the exact value from 31 on)
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df: int) -> float:
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df


@dataclass(frozen=True)
class Interval:
    """The mean of n values and its 95 % interval (none for n = 1: one pair says nothing of the noise);
    `machines`: how many machine kinds the values came from, where they were grouped by them (7J)."""

    n: int
    mean: float
    lo: float | None
    hi: float | None
    machines: int | None = None
    se: float | None = field(default=None, compare=False)  # the mean's standard error: for differences of two

    @property
    def excludes_zero(self) -> bool:
        return self.lo is not None and (self.lo > 0 or self.hi < 0)

    @property
    def above_zero(self) -> bool:
        return self.lo is not None and self.lo > 0

    def text(self) -> str:
        """'+0.021 [-0.004, +0.046], n = 8, 3 machines' (the interval left out for one pair; the machine
        kinds said where the values were grouped by them)."""
        where = f" [{self.lo:+.3f}, {self.hi:+.3f}]" if self.lo is not None else ""
        kinds = "" if self.machines is None else ", one machine" if self.machines == 1 else f", {self.machines} machines"
        return f"{self.mean:+.3f}{where}, n = {self.n}{kinds}"

    @classmethod
    def from_json(cls, d: dict) -> Interval:
        """The interval as_json wrote (evidence.json, a bench's summary)."""
        return cls(d["n"], d["mean"], *(d["ci95"] or (None, None)), d.get("machines"))

    def as_json(self) -> dict:
        out = {"n": self.n, "mean": round(self.mean, 4),
               "ci95": None if self.lo is None else [round(self.lo, 4), round(self.hi, 4)]}
        return out if self.machines is None else {**out, "machines": self.machines}


def mean_interval(values: list[float]) -> Interval:
    """The mean and its 95 % t-interval."""
    n, mean = len(values), statistics.fmean(values)
    if n < 2:
        return Interval(n, mean, None, None)
    se = statistics.stdev(values) / math.sqrt(n)
    return Interval(n, mean, mean - t975(n - 1) * se, mean + t975(n - 1) * se, se=se)


Z975 = 1.959964  # the normal's 0.975 quantile: random effects' and the interactions' intervals (7J)


def machine_interval(groups: list[list[float]]) -> Interval:
    """The paired differences grouped by machine kind (docs/scaling.md 7J, point 1): one kind, the seeds'
    t-interval; several, DerSimonian and Laird's random-effects mean of the kinds' means D(m), each weighted
    by 1 / (v(m) + tau^2), v(m) = var / n(m), tau^2 from Cochran's Q, +-1.96 standard errors. A kind with
    one pair takes the pooled within-kind variance of the kinds with two or more (none: no interval)."""
    groups = [g for g in groups if g]
    n = sum(len(g) for g in groups)
    if len(groups) == 1:
        return replace(mean_interval(groups[0]), machines=1)
    means = [statistics.fmean(g) for g in groups]
    dof = sum(len(g) - 1 for g in groups)
    if dof == 0:
        return Interval(n, statistics.fmean(means), None, None, len(groups))
    pooled = sum((len(g) - 1) * statistics.variance(g) for g in groups if len(g) > 1) / dof
    v = [max(statistics.variance(g) if len(g) > 1 else pooled, 1e-12) / len(g) for g in groups]
    mean, se = _dersimonian_laird(means, v)
    return Interval(n, mean, mean - Z975 * se, mean + Z975 * se, len(groups), se)


def _dersimonian_laird(means: list[float], v: list[float]) -> tuple[float, float]:
    """The random-effects mean of group means with within-group variances v, and its standard error."""
    w = [1 / vi for vi in v]
    fixed = sum(wi * m for wi, m in zip(w, means)) / sum(w)
    q = sum(wi * (m - fixed) ** 2 for wi, m in zip(w, means))
    c = sum(w) - sum(wi * wi for wi in w) / sum(w)
    tau2 = max(0.0, (q - (len(means) - 1)) / c)
    w_star = [1 / (vi + tau2) for vi in v]
    return sum(wi * m for wi, m in zip(w_star, means)) / sum(w_star), math.sqrt(1 / sum(w_star))


def estimate_difference(a: Interval, b: Interval) -> Interval:
    """a's estimate minus b's, the standard error the root of the sum of their squares, +-1.96 (7J point 2:
    the MuSGD x SGD interaction; point 1 for the device x policy one); no interval where either has none."""
    mean = a.mean - b.mean
    if a.se is None or b.se is None:
        return Interval(a.n + b.n, mean, None, None)
    se = math.hypot(a.se, b.se)
    return Interval(a.n + b.n, mean, mean - Z975 * se, mean + Z975 * se, se=se)


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
