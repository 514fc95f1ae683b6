"""What the XLA backend measures about itself: compilations, CPU fallbacks and step times, read on
the host only (no device reads inside an epoch), and the result it returns."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def compile_count() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def compile_seconds() -> float:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return float(data[1]) / 1e9 if data else 0.0  # accumulator is in ns


def fallback_ops() -> dict[str, int]:
    """Ops that fell back to the CPU (e.g. ``aten::nonzero``, ``_local_scalar_dense`` = .item())."""
    import torch_xla.debug.metrics as met

    return {n: int(met.counter_value(n) or 0) for n in met.counter_names() if n.startswith("aten::")}


class StepLog:
    """Per-step compile counts and wall times (host side only: no device reads).

    The loader's ``torch_xla.sync()`` at the top of step k+1 compiles (if needed) and launches
    step k's graph, so the count read there is attributed to step k.
    """

    def __init__(self):
        self.compiles: list[int] = []  # cumulative CompileTime count after each step
        self.times: list[float] = []  # wall seconds of each step (to the next step's start)
        self.trace: list[float] = []  # host seconds spent tracing each step (the loop body)
        self.start_count = 0  # CompileTime count before the first step
        self._t: float | None = None

    def begin(self):
        self.start_count = compile_count()

    def start(self):
        """Called at the top of each iteration, after the loader's sync for the previous step."""
        now = time.perf_counter()
        self._close(now)
        self._t = now

    def traced(self):
        """Called at the end of the loop body: the host time spent building the step's graph."""
        if self._t is not None:
            self.trace.append(time.perf_counter() - self._t)

    def end_epoch(self):
        self._close(time.perf_counter())
        self._t = None

    def _close(self, now):
        if self._t is not None:
            self.compiles.append(compile_count())
            self.times.append(now - self._t)

    def summary(self) -> dict[str, Any]:
        steps = len(self.compiles)
        prev = [self.start_count] + self.compiles[:-1]
        grew = [i for i in range(steps) if self.compiles[i] > prev[i]]
        last = grew[-1] if grew else -1
        steady = self.times[last + 1 :]
        steady_trace = self.trace[last + 1 : len(self.times)]
        return {
            "xla/compile_count": compile_count(),
            "xla/compile_time_s": round(compile_seconds(), 3),
            "xla/train_steps": steps,
            "xla/compile_steps": grew,  # step indices whose graph had to be compiled
            "xla/compiles_per_step": [c - self.start_count for c in self.compiles],  # cumulative
            "xla/step_times_s": [round(t, 4) for t in self.times],
            "xla/steady_step_time_s": round(float(np.median(steady)), 5) if steady else None,
            "xla/steady_steps": len(steady),
            # host time to trace one step; if it is close to the step time, the run is host-bound
            "xla/steady_trace_time_s": round(float(np.median(steady_trace)), 5) if steady_trace else None,
            "xla/fallback_ops": fallback_ops(),
        }


# ---------------------------------------------------------------------------------- trainer


def trainer_result(self) -> dict[str, Any]:
    """What train_xla returns: the final metrics, the run's XLA settings and compile statistics."""
    out: dict[str, Any] = {k: float(v) for k, v in (self.metrics or {}).items()}
    fitness = getattr(self, "final_fitness", None)
    out["fitness"] = float(fitness if fitness is not None else (self.fitness or 0.0))
    out["best_fitness"] = None if self.best_fitness is None else float(self.best_fitness)
    out["epochs_completed"] = int(self.epoch + 1)
    out["save_dir"] = str(self.save_dir)
    out["xla/world_size"] = self.xla_world
    out["xla/max_boxes"] = self.max_boxes
    out["xla/max_boxes_seen"] = self.host_batches.max_seen if self.host_batches else 0
    out["xla/truncated_images"] = self.host_batches.truncated_images if self.host_batches else 0
    out["xla/batch_boxes"] = list(self.host_batches.batch_boxes) if self.host_batches else []
    out["xla/bf16"] = self.bf16
    out.update(self.step_log.summary())
    return out


