"""What the tests read back from the trackers, with the trackers' own readers: MLflow's client (runs,
every value of a metric by step, nested runs, artifacts) and TensorBoard's event file loader."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.rundir.tracking import MLFLOW_RECORD, TENSORBOARD, mlflow_client


def mlflow_record(run_dir: Path) -> dict:
    return json.loads((Path(run_dir) / MLFLOW_RECORD).read_text())


def mlflow_runs(uri: str, experiment: str) -> list:
    """Every run of `experiment` in the store at `uri` (oldest first)."""
    client = mlflow_client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return list(reversed(client.search_runs([found.experiment_id], max_results=1000)))


def metric_steps(uri: str, run_id: str, key: str) -> list[int]:
    """The steps (epochs) of every value of `key` the run holds, in the order logged."""
    history = mlflow_client(uri).get_metric_history(run_id, key)
    return [m.step for m in sorted(history, key=lambda m: (m.timestamp, m.step))]


def artifact_paths(uri: str, run_id: str, folder: str | None = None) -> list[str]:
    return sorted(a.path for a in mlflow_client(uri).list_artifacts(run_id, folder))


def tensorboard_steps(run_dir: Path, tag: str, folder: str = TENSORBOARD) -> list[int]:
    """The steps of every scalar `tag` in the event files of RUN_DIR/folder (default: the tool's own
    TensorBoard folder; "" for the run directory, where Ultralytics' own callback writes), over all files."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps = []
    for path in sorted((Path(run_dir) / folder).glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            if event.HasField("summary") and any(v.tag == tag for v in event.summary.value):
                steps.append(event.step)
    return steps
