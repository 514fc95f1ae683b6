"""A study in MLflow: one parent run per study, each trial's run nested under it (MLflow's
`mlflow.parentRunId` tag), each trial's outcome (COMPLETE, PRUNED, FAIL) tagged on its run when it ends,
and the parent finished with the best value and params by the sweep's final report.

The parent's id is kept in the study's user attributes, so every worker of the study (local ones, a Slurm
array's, another machine's on PostgreSQL) nests its trials under the same parent. Like the training
process's trackers, MLflow never costs the sweep: a store that fails here is one printed warning and the
trials train on (each still logs its own run). Imports mlflow lazily; called only for a job with `mlflow:`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from orchestrator.rundir.tracking import MLFLOW_RECORD, experiment_for, mlflow_client

PARENT_ATTR = "mlflow_parent"  # the study's user attribute: {"tracking_uri", "run_id"}


def trial_tags(study_name: str, number: int, parent_id: str | None) -> dict[str, str]:
    tags = {"optuna.study": study_name, "optuna.trial": str(number)}
    if parent_id:
        tags["mlflow.parentRunId"] = parent_id
    return tags


def parent_run(study, settings: dict[str, Any], say: Callable[[str], None] = print) -> str | None:
    """The study's parent run in the store `settings` names (orchestrator/tracking.effective_mlflow),
    made by the first worker that needs it; None when the store cannot be used (said once)."""
    known = study.user_attrs.get(PARENT_ATTR) or {}
    if known.get("tracking_uri") == settings["tracking_uri"]:
        return known["run_id"]
    try:
        client = mlflow_client(settings["tracking_uri"])
        experiment = experiment_for(client, settings["tracking_uri"], settings["experiment"])
        run = client.create_run(experiment, run_name=study.study_name,
                                tags={**settings.get("tags", {}), "optuna.study": study.study_name})
        study.set_user_attr(PARENT_ATTR, {"tracking_uri": settings["tracking_uri"], "run_id": run.info.run_id})
        winner = study.user_attrs.get(PARENT_ATTR) or {}
        if winner.get("run_id") != run.info.run_id:  # another worker made one at the same moment: theirs stands
            client.delete_run(run.info.run_id)
        return winner.get("run_id")
    except Exception as exc:  # noqa: BLE001 - the trials log their own runs anyway
        say(f"warning: MLflow: no parent run for study {study.study_name} ({type(exc).__name__}: {exc}); "
            "its trials are logged as runs of their own")
        return None


def tag_trial(run_dir: Path, state: str, values: list[float] | None = None, say: Callable[[str], None] = print,
              close: bool = False) -> None:
    """The trial's MLflow run (RUN_DIR/mlflow.json) tagged with its Optuna state and objective value(s).
    `close`: a trial whose training process was killed (its worker SIGKILLed, a Ctrl-C) left its run RUNNING:
    it is ended KILLED."""
    record_path = Path(run_dir) / MLFLOW_RECORD
    if not record_path.is_file():
        return  # the training never opened its MLflow run (it failed before, or no store took it)
    record = json.loads(record_path.read_text())
    try:
        client = mlflow_client(record["tracking_uri"])
        client.set_tag(record["run_id"], "optuna.state", state)
        for i, value in enumerate(values or []):
            client.set_tag(record["run_id"], f"optuna.value{'' if i == 0 else i}", str(value))
        if close and client.get_run(record["run_id"]).info.status == "RUNNING":
            client.set_terminated(record["run_id"], status="KILLED")
    except Exception as exc:  # noqa: BLE001
        say(f"warning: MLflow: could not tag the trial's run {record.get('run_id')} {state} ({type(exc).__name__}: {exc})")


def close_failed_trial(trial, say: Callable[[str], None] = print) -> None:
    """A trial failed for its worker (heartbeat-stale: the worker was SIGKILLed, its machine lost): its MLflow run,
    left RUNNING by the training process that died with it, tagged FAIL and ended KILLED. Its run folder is named by
    the trial (on another machine's disk it is not there to read: nothing to do)."""
    run_dir = trial.user_attrs.get("run_dir")
    if run_dir:
        tag_trial(Path(run_dir), "FAIL", say=say, close=True)


def finish_parent(study, best: dict[str, Any] | None, say: Callable[[str], None] = print) -> None:
    """The parent run finished, with the best trial's value and params (when there is one)."""
    known = study.user_attrs.get(PARENT_ATTR)
    if not known:
        return
    try:
        client = mlflow_client(known["tracking_uri"])
        if best:
            if best.get("value") is not None:
                client.log_metric(known["run_id"], "best_value", float(best["value"]))
            for key, value in (best.get("params") or {}).items():
                client.set_tag(known["run_id"], f"best.{key}", str(value))
            client.set_tag(known["run_id"], "best.trial", str(best.get("number")))
        client.set_terminated(known["run_id"], status="FINISHED")
    except Exception as exc:  # noqa: BLE001
        say(f"warning: MLflow: could not finish the study's parent run ({type(exc).__name__}: {exc})")
