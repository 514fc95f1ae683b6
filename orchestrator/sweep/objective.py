"""One trial, in a sweep worker process (no torch here): sample the search space, build
the trial's job (base job + sampled reference-scale values), plan it (the scaler maps it
to the target devices), create a normal run (run dir, log, registry row tagged study and
trial) and execute it in a child process. The training process reports every epoch to
the study and stops itself when pruned (orchestrator/sweep/trial_callback.py); this side
reads its verdict from `trial.json` in the run directory and tells Optuna."""

from __future__ import annotations

import copy
import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from orchestrator.rundir import LOG, TrialLink
from orchestrator.plan import make_plan
from orchestrator.errors import UserError
from orchestrator.jobspec.loader import LoadedJob, load_job_dict
from orchestrator.sweep import mlflow_study
from orchestrator.sweep.outage import retrying
from orchestrator.sweep.study import ENV_STORAGE
from orchestrator.sweep.trial_callback import TRIAL_CALLBACK, TRIAL_RESULT
from orchestrator.tracking import effective_mlflow

if TYPE_CHECKING:
    import optuna

    from orchestrator.sweep.loader import LoadedSweep, Param


class TrialFailed(Exception):
    """The trial's training failed (crash, bad sampled combination): FAIL, the sweep goes on."""


def suggest(trial: "optuna.Trial", params: list["Param"]) -> dict[str, Any]:
    out = {}
    for p in params:
        if p.kind == "categorical":
            out[p.name] = trial.suggest_categorical(p.name, p.choices)
        elif p.kind == "int":
            out[p.name] = trial.suggest_int(p.name, int(p.low), int(p.high), step=int(p.step or 1), log=p.log)
        else:
            out[p.name] = trial.suggest_float(p.name, float(p.low), float(p.high), step=p.step, log=p.log)
    return out


def trial_name(study: str, number: int) -> str:
    return f"{study}-trial{number}"


def trial_job_raw(sweep: "LoadedSweep", params: dict[str, Any], number: int) -> dict:
    """The base job with the sampled values set at reference scale, named after the trial,
    its W&B run grouped under the study."""
    raw = copy.deepcopy(sweep.base_raw)
    hyp = raw.get("hyp") or {}
    hyp = {"preset": hyp} if isinstance(hyp, str) else dict(hyp)
    overrides = dict(raw.get("overrides") or {})
    for name, value in params.items():
        section, key = name.split(".", 1)
        (hyp if section == "hyp" else overrides)[key] = value
    raw["hyp"] = hyp
    raw["overrides"] = overrides
    raw["name"] = trial_name(sweep.study, number)
    raw["runs_dir"] = str(sweep.runs_root)
    wandb = dict(raw.get("wandb") or {})
    wandb["group"] = sweep.study
    wandb["tags"] = list(dict.fromkeys([*(wandb.get("tags") or []), f"study:{sweep.study}", f"trial:{number}"]))
    raw["wandb"] = wandb
    if raw.get("mlflow") is not None:  # every trial in one experiment (its name would make one per trial)
        raw["mlflow"] = {**raw["mlflow"], "experiment": raw["mlflow"].get("experiment") or sweep.study}
    return raw


def trial_job(sweep: "LoadedSweep", params: dict[str, Any], number: int, devices: str | None = None) -> LoadedJob:
    return load_job_dict(trial_job_raw(sweep, params, number), base_dir=sweep.base_dir,
                         label=f"trial {number}", devices=devices)


def trial_link(sweep: "LoadedSweep", trial: "optuna.Trial", params: dict[str, Any]) -> TrialLink:
    """What the training process needs to report to its trial (the storage URL travels in the
    environment: it may hold a password)."""
    return TrialLink(study=sweep.study, trial=trial.number, trial_id=trial._trial_id, params=params,
                     objectives=[o.model_dump() for o in sweep.spec.objectives], pruner=sweep.spec.pruner.model_dump())


def _mark_pruned(run_id: str, run_dir: Path, note: str) -> None:
    """The registry row of a pruned trial says `pruned` (the run itself finished cleanly)."""
    from orchestrator.registry import Registry, RunState

    try:
        with Registry.of_run(run_dir) as reg:
            reg.move(run_id, RunState.PRUNED, expect=RunState.FINISHED, note=note)
    except Exception as exc:  # noqa: BLE001 - the registry is a record, never a reason to fail a trial
        print(f"warning: could not mark run {run_id} pruned in the registry: {exc}", flush=True)


class TrialRunner:
    """The objective of one trial (trial_loop.run_trial): its value(s), or TrialFailed, optuna.TrialPruned.
    Its own storage calls wait through an outage (sweep/outage.py)."""

    def __init__(self, sweep: "LoadedSweep", url: str, say: Callable[[str], None] = print,
                 group: tuple[str, str] | None = None):
        self.sweep = sweep
        self.devices, self.group = group or (None, None)  # a pinned worker's trial devices and group label
        self.url = url
        self.say = say
        self.run_dir: Path | None = None  # the running trial's, once made: an interrupt closes its MLflow run
        self._data = None  # the base job's data, described at the first trial (a trial never changes it)

    def __call__(self, trial: "optuna.Trial"):
        import optuna

        from orchestrator.runner import create_run, execute

        sweep = self.sweep
        params = retrying(lambda: suggest(trial, sweep.params), self.say, f"sampling trial {trial.number}")
        self.run_dir = None
        try:
            job = trial_job(sweep, params, trial.number, self.devices)
            plan = make_plan(job, data=self._data)  # counting the images walks the dataset: once per worker
            self._data = plan.data
        except UserError as exc:
            raise TrialFailed(f"sampled values make an invalid job: {'; '.join(exc.problems)}") from None
        if plan.job.spec.mlflow is not None:  # nested under the study's parent run
            parent = mlflow_study.parent_run(trial.study, effective_mlflow(plan.job.spec, sweep.runs_root), self.say)
            plan.job.spec.mlflow.tags.update(mlflow_study.trial_tags(sweep.study, trial.number, parent))
        tags = {"study": sweep.study, "trial": trial.number, **({"device_group": self.group} if self.group else {})}
        # the training process reports to Optuna through the trial's callback
        run_id, run_dir = create_run(plan, tags=tags, trial=trial_link(sweep, trial, params),
                                     callbacks=[TRIAL_CALLBACK])
        self.run_dir = run_dir
        attrs = {"run_id": run_id, "run_dir": str(run_dir), "host": socket.gethostname(), "device_group": self.group,
                 "worker_pid": os.getpid(), "cli_pid": int(os.environ.get("YOLO_ORCH_SWEEP_CLI", 0))}
        retried = retrying(lambda: self._record_attrs(trial, attrs), self.say, f"recording trial {trial.number}")
        self.say(f"trial {trial.number} -> run {run_id} ({run_dir})"
                 + (f" [retry of trial {retried}]" if retried is not None else "")
                 + f" params {json.dumps(params, default=str)}")

        os.environ[ENV_STORAGE] = self.url  # inherited by the training process
        outcome = execute(plan, run_id, run_dir, on_event=self._on_event(trial.number))
        result = _read_result(run_dir)
        if result.get("history") is not None:
            retrying(lambda: trial.set_user_attr("epochs", len(result["history"])), self.say,
                     f"recording trial {trial.number}")
        if outcome.state == "killed":  # its training process was stopped mid-run (trial_loop closes its MLflow run)
            raise KeyboardInterrupt(f"trial {trial.number}: interrupted")
        if result.get("state") == "pruned":
            step, values = result.get("step"), result.get("values") or []
            note = f"pruned by the sweep at epoch {step} (objective {values[0] if values else '?'})"
            _mark_pruned(run_id, run_dir, note)
            self._tag_mlflow(plan, run_dir, "PRUNED", values)
            self.say(f"trial {trial.number}: {note}")
            raise optuna.TrialPruned(note)
        if outcome.state != "finished" or result.get("state") != "complete":
            self._tag_mlflow(plan, run_dir, "FAIL")
            tail = _log_tail(run_dir / LOG)
            raise TrialFailed(f"run {run_id} {outcome.state} (exit {outcome.exit_code}); {run_dir / LOG}:\n{tail}")
        values = [float(v) for v in result["values"]]
        self._tag_mlflow(plan, run_dir, "COMPLETE", values)
        self.say(f"trial {trial.number}: complete, objective {values}")
        return values[0] if len(values) == 1 else values

    def _tag_mlflow(self, plan, run_dir: Path, state: str, values: list | None = None) -> None:
        if plan.job.spec.mlflow is not None:
            mlflow_study.tag_trial(run_dir, state, values, self.say)

    @staticmethod
    def _record_attrs(trial: "optuna.Trial", attrs: dict[str, Any]):
        """The run's coordinates on the trial; the trial it retries, if any."""
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        return trial.storage.get_trial_system_attrs(trial._trial_id).get("failed_trial")

    def _on_event(self, number: int):
        def on_event(event: dict) -> None:
            if event.get("event") == "epoch":
                self.say(f"trial {number}: epoch {event['epoch']}/{event['epochs']} fitness {event.get('fitness')}")
        return on_event


def _read_result(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / TRIAL_RESULT).read_text())
    except (OSError, ValueError):
        return {}


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
