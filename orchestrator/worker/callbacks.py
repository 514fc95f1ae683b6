"""Callbacks the orchestrator attaches to every Ultralytics trainer it runs."""

from __future__ import annotations

import time
from typing import Any, Callable

from orchestrator.rundir import ENV_CALLBACKS, EventWriter, ResolvedRun, float_or_none, missing_epochs
from orchestrator.rundir.contract import RUN_FOLDER_HOOKS

PROGRESS_EVERY_S = 1.0


def epoch_metrics(trainer) -> dict[str, float]:
    metrics: dict[str, Any] = {}
    if getattr(trainer, "tloss", None) is not None:
        metrics.update(trainer.label_loss_items(trainer.tloss, prefix="train"))
    metrics.update(trainer.metrics or {})
    metrics.update(getattr(trainer, "lr", {}) or {})
    return {k: round(float(v), 6) for k, v in metrics.items()}


class EpochBoundary:
    """Tells a real epoch's on_fit_epoch_end from the one Ultralytics fires once more for the final
    validation of best.pt (with epoch+1, see BaseTrainer.final_eval): that call has no
    on_train_epoch_end before it."""

    _in_epoch = False

    def on_train_epoch_end(self, trainer) -> None:
        self._in_epoch = True

    def fit_ends_epoch(self) -> bool:
        """Call once in on_fit_epoch_end: True after a training epoch, False for the final validation."""
        real, self._in_epoch = self._in_epoch, False
        return real


class EpochReporter(EpochBoundary):
    """Emits one `epoch` event per training epoch; the final validation of best.pt is not counted
    as an epoch and is reported as the `final_eval` event instead."""

    def __init__(self, events: EventWriter | None, sinks: list[Callable[[int, dict], None]] = (),
                 extras: list[Callable[[], dict[str, float]]] = ()):
        self.events = events
        self.sinks = list(sinks)
        self.extras = list(extras)  # more per-epoch metrics, e.g. grad_norm.GradNormMeter.epoch_metrics
        self.seen: set[int] = set()
        self.started = time.time()
        self.final_metrics: dict[str, float] | None = None
        self._batches = 0
        self._last_progress = 0.0

    def on_train_epoch_start(self, trainer) -> None:
        self._batches = 0

    def on_train_batch_end(self, trainer) -> None:
        """A `progress` event at most every PROGRESS_EVERY_S seconds, so the orchestrator's bar moves
        within an epoch as Ultralytics' own does (one short line a second: no cost to training)."""
        self._batches += 1
        now = time.time()
        if self.events is None or now - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = now
        try:
            batches = len(trainer.train_loader)
        except TypeError:
            batches = None
        self.events.emit("progress", epoch=int(trainer.epoch) + 1, epochs=trainer.epochs, batch=self._batches,
                         batches=batches)

    def on_train_start(self, trainer) -> None:
        if self.events:
            self.events.emit("train_start", epochs=trainer.epochs, start_epoch=trainer.start_epoch,
                             batch=trainer.batch_size, accumulate=trainer.accumulate,
                             world_size=getattr(trainer, "xla_world", trainer.world_size))  # XLA: its mesh
            for epoch, metrics in missing_epochs(self.events.path, int(trainer.start_epoch or 0)):
                self.seen.add(epoch - 1)
                self.events.emit("epoch", epoch=epoch, epochs=trainer.epochs, metrics=metrics, recovered=True)
                for sink in self.sinks:  # (W&B never saw it: the kill came before its event)
                    sink(epoch, metrics)

    def on_fit_epoch_end(self, trainer) -> None:
        if not self.fit_ends_epoch():
            self.final_metrics = {k: round(float(v), 6) for k, v in (trainer.metrics or {}).items()}
            if self.events:
                self.events.emit("final_eval", metrics=self.final_metrics)
            return
        epoch = int(trainer.epoch)
        self.seen.add(epoch)
        metrics = epoch_metrics(trainer)
        for extra in self.extras:
            metrics.update(extra())
        if self.events:
            self.events.emit("epoch", epoch=epoch + 1, epochs=trainer.epochs, metrics=metrics,
                             fitness=float_or_none(trainer.fitness), elapsed=time.time() - self.started)
        for sink in self.sinks:
            sink(epoch + 1, metrics)

    def attach(self, model) -> None:
        model.add_callback("on_train_start", self.on_train_start)
        model.add_callback("on_train_epoch_end", self.on_train_epoch_end)
        model.add_callback("on_fit_epoch_end", self.on_fit_epoch_end)
        model.add_callback("on_train_epoch_start", self.on_train_epoch_start)
        model.add_callback("on_train_batch_end", self.on_train_batch_end)


def attach_named(model, run_dir, resolved: ResolvedRun) -> None:
    """The hooks the run names (ResolvedRun.callbacks, only those a run folder may name: the contract refused
    any other when the file was read, and this refuses it again) and then $YOLO_ORCH_CALLBACKS (the user's own
    environment), each "module:function", imported by name so that the training process depends on none of them."""
    import importlib
    import os

    foreign = [name for name in resolved.callbacks if name not in RUN_FOLDER_HOOKS]
    if foreign:
        raise RuntimeError(f"callbacks: {', '.join(foreign)}: not a hook a run folder may name; not imported")
    from_env = [n.strip() for n in os.environ.get(ENV_CALLBACKS, "").split(",") if n.strip()]
    for name in resolved.callbacks + from_env:
        module, _, function = name.partition(":")
        getattr(importlib.import_module(module), function)(model, run_dir, resolved)
