"""Inside the TRAINING process of a sweep trial (attached by orchestrator/worker/train.py
when job.resolved.yaml has a `sweep:` section).

- Every training epoch: compute the objective, `trial.report(value, epoch)`, ask
  `trial.should_prune()`; when pruned set `trainer.stop = True` (Ultralytics ends the
  epoch loop cleanly, saves, validates best.pt) and record the verdict in trial.json.
  The extra `on_fit_epoch_end` fired by the final validation of best.pt is not an epoch
  (no `on_train_epoch_end` precedes it) and is never reported.
- At the end: trial.json = {"state": "complete"|"pruned", "values": [...], "step": N,
  "history": [...]}; the sweep worker reads it and tells Optuna.
- The trial is opened from the storage (SQLite or PostgreSQL) with
  `optuna.trial.Trial(study, trial_id)`; the URL comes from $YOLO_ORCH_SWEEP_STORAGE.
- A killed sweep worker takes this process down with it: the runner's supervisor watch
  (orchestrator/worker/recovery.py) ends the process group when its supervisor vanishes.
- W&B (when a run is active): the trial's params in the config, state and objective in
  the summary; the run is grouped by study through the job's wandb.group.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from orchestrator.rundir import ResolvedRun, TrialLink, float_or_none, is_primary, write_json_atomic
from orchestrator.rundir.contract import SWEEP_TRIAL_HOOK
from orchestrator.sweep.study import ENV_STORAGE
from orchestrator.worker.callbacks import EpochBoundary

TRIAL_RESULT = "trial.json"
REPORT_PATIENCE_S = 60.0  # an epoch's report waits this long for an unreachable storage, then training goes on


def objective_value(trainer, metric: str) -> float | None:
    if metric == "fitness":
        return float_or_none(trainer.fitness)
    if metric.startswith("train/"):
        if getattr(trainer, "tloss", None) is None:
            return None
        return float_or_none(trainer.label_loss_items(trainer.tloss, prefix="train").get(metric))
    return float_or_none((trainer.metrics or {}).get(metric))


class TrialReporter(EpochBoundary):
    def __init__(self, run_dir: Path, sweep: TrialLink, storage_url: str | None):
        self.run_dir = run_dir
        self.sweep = sweep
        self.url = storage_url
        self.metrics = sweep.metrics
        self.directions = sweep.directions
        self.trial = None
        self.history: list[dict[str, Any]] = []  # {"step", "values", "fitness"}
        self.final_metrics: dict[str, float] = {}
        self.pruned_step: int | None = None

    # ---- optuna
    def _open_trial(self):
        if self.trial is not None or not self.url:
            return self.trial
        import optuna

        from orchestrator.sweep.study import make_pruner, make_storage, quiet_optuna

        quiet_optuna()
        storage = make_storage(self.url)  # no heartbeat here: the sweep worker beats for this trial
        study = optuna.load_study(study_name=self.sweep.study, storage=storage,
                                  sampler=optuna.samplers.RandomSampler(), pruner=make_pruner(self.sweep.pruner))
        self.trial = optuna.trial.Trial(study, int(self.sweep.trial_id))
        return self.trial

    # ---- callbacks
    def on_train_start(self, trainer) -> None:
        if not is_primary():
            return
        try:
            self._open_trial()
        except Exception as exc:  # noqa: BLE001 - training goes on; the worker records what it can
            print(f"sweep: cannot open trial {self.sweep.trial} in the study storage: {exc}", flush=True)
        self._wandb_config()

    def on_fit_epoch_end(self, trainer) -> None:
        if not self.fit_ends_epoch():  # the final validation of best.pt: not an epoch
            self.final_metrics = {k: float_or_none(v) for k, v in (trainer.metrics or {}).items()}
            return
        if not is_primary():
            return
        step = int(trainer.epoch) + 1
        values = [objective_value(trainer, m) for m in self.metrics]
        self.history.append({"step": step, "values": values, "fitness": float_or_none(trainer.fitness)})
        if self.pruned_step is not None or len(values) != 1 or values[0] is None:
            return
        trial = self.trial
        if trial is None:  # the storage was away at the start: try again, quietly, each epoch
            try:
                trial = self._open_trial()
            except Exception:  # noqa: BLE001 - still away: this epoch is not reported
                return
            if trial is None:
                return
        value = values[0]
        import optuna

        from orchestrator.sweep.outage import retrying
        from orchestrator.sweep.study import StorageError

        def report() -> bool:
            if math.isfinite(value):
                trial.report(value, step)
            # the last epoch is paid for: pruning there saves nothing and throws away a finished model
            return step < int(trainer.epochs) and trial.should_prune()

        try:
            prune = retrying(report, lambda m: print(f"sweep: {m}", flush=True), f"reporting epoch {step}",
                             patience=REPORT_PATIENCE_S)
        except StorageError as exc:  # training goes on: this epoch is not reported, the worker tells the end
            print(f"sweep: {exc}", flush=True)
            return
        except optuna.exceptions.UpdateFinishedTrialError:
            # the study already closed this trial (its worker was presumed dead): stop wasting compute
            print(f"sweep: trial {self.sweep.trial} was closed by the study; stopping", flush=True)
            self.pruned_step = step
            trainer.stop = True
            return
        if prune:
            self.pruned_step = step
            trainer.stop = True  # ends the epoch loop cleanly (broadcast to all ranks under DDP)
            print(f"sweep: trial {self.sweep.trial} pruned at epoch {step} ({self.metrics[0]} = {value})",
                  flush=True)
            self._write("pruned", values, step)

    def on_train_end(self, trainer) -> None:
        if not is_primary() or self.pruned_step is not None:
            return
        values = self.final_values(trainer)
        self._write("complete", values, len(self.history))

    def final_values(self, trainer) -> list[float | None]:
        """A complete trial is worth what its best.pt is worth: Ultralytics' best fitness for
        `fitness`; the final validation of best.pt for other metrics, else the metric at the
        epoch best.pt was saved (best fitness)."""
        best_step = None
        if self.history:
            scored = [h for h in self.history if h["fitness"] is not None]
            if scored:
                best_step = max(scored, key=lambda h: h["fitness"])["step"]  # first of equals, as Ultralytics
        out = []
        for i, metric in enumerate(self.metrics):
            if metric == "fitness" and trainer.best_fitness is not None:
                out.append(float_or_none(trainer.best_fitness))
            elif self.final_metrics.get(metric) is not None:
                out.append(self.final_metrics[metric])
            elif best_step is not None:
                out.append(next(h["values"][i] for h in self.history if h["step"] == best_step))
            else:
                out.append(self.history[-1]["values"][i] if self.history else None)
        return out

    # ---- outputs
    def _write(self, state: str, values: list, step: int | None) -> None:
        result = {"state": state, "values": values, "step": step, "metrics": self.metrics,
                  "directions": self.directions, "history": self.history, "trial": self.sweep.trial,
                  "study": self.sweep.study}
        write_json_atomic(self.run_dir / TRIAL_RESULT, result)
        self._wandb_summary(state, values, step)

    def _wandb_config(self) -> None:
        run = _wandb_run()
        if run is None:
            return
        try:
            run.config.update({"sweep": {"study": self.sweep.study, "trial": self.sweep.trial,
                                         "params": self.sweep.params,
                                         "objectives": self.sweep.objectives}}, allow_val_change=True)
        except Exception as exc:  # noqa: BLE001
            print(f"sweep: W&B config update failed: {exc}", flush=True)

    def _wandb_summary(self, state: str, values: list, step: int | None) -> None:
        run = _wandb_run()
        if run is None:
            return
        try:
            run.summary["sweep/state"] = state
            run.summary["sweep/epochs"] = step
            for metric, value in zip(self.metrics, values):
                run.summary[f"sweep/objective/{metric}"] = value
            if len(values) == 1:
                run.summary["sweep/objective"] = values[0]
        except Exception as exc:  # noqa: BLE001
            print(f"sweep: W&B summary update failed: {exc}", flush=True)

    def attach(self, model) -> "TrialReporter":
        model.add_callback("on_train_start", self.on_train_start)
        model.add_callback("on_train_epoch_end", self.on_train_epoch_end)
        model.add_callback("on_fit_epoch_end", self.on_fit_epoch_end)
        model.add_callback("on_train_end", self.on_train_end)
        return self


def _wandb_run():
    wandb = sys.modules.get("wandb")  # only when the run's WandbLogger imported it
    return getattr(wandb, "run", None) if wandb is not None else None


TRIAL_CALLBACK = SWEEP_TRIAL_HOOK  # named in a trial's job.resolved.yaml (ResolvedRun.callbacks): this module's
# `attach`, the one hook a run folder may name (rundir/contract.py; tests/unit/test_resolved_contract.py ties them)


def attach(model, run_dir: Path, resolved: ResolvedRun) -> TrialReporter:
    """Called by name in the training process (worker/callbacks.attach_named)."""
    return TrialReporter(run_dir, resolved.sweep, os.environ.get(ENV_STORAGE)).attach(model)
