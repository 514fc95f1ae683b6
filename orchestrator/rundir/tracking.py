"""What the two processes agree on about where a run's results go besides its folder: Ultralytics' own
integrations a job may switch on, the MLflow run a run logs to (its record in the run directory, so a
resume continues the same MLflow run), the TensorBoard folder, the export formats."""

from __future__ import annotations

from pathlib import Path

# Ultralytics' settings keys of its callbacks (ultralytics/utils/__init__.py SETTINGS). The training
# process switches them all off unless the job lists them; its own W&B logger stands for `wandb`.
ULTRALYTICS_INTEGRATIONS = ("clearml", "comet", "dvc", "mlflow", "raytune", "tensorboard")
EVERY_ULTRALYTICS_INTEGRATION = (*ULTRALYTICS_INTEGRATIONS, "wandb")

MLFLOW_RECORD = "mlflow.json"  # the store decided at run creation (`settings`), then the MLflow run(s) it logs to
MLFLOW_DB = "mlflow.db"  # the default store: one SQLite file in the runs folder for every run under it
MLFLOW_ARTIFACTS = "mlartifacts"  # the default store's artifacts, beside it
TENSORBOARD = "tensorboard"  # the run's TensorBoard event files (tensorboard --logdir runs/)


def default_tracking_uri(runs_dir: Path) -> str:
    """The local store of a runs folder (no server): `mlflow ui --backend-store-uri` with this shows them all."""
    return f"sqlite:///{Path(runs_dir).resolve() / MLFLOW_DB}"


def sqlite_file(uri: str) -> Path | None:
    """The database file of a `sqlite:///PATH` store; None for any other store (a server, an in-memory one)."""
    if not uri.startswith("sqlite:///") or len(uri) == len("sqlite:///"):
        return None
    return Path(uri[len("sqlite:///"):].split("?", 1)[0])


def mlflow_client(uri: str):
    """MLflow's client for the store `uri`. A SQLite store is opened under a lock beside it (`.mlflow.db.lock`):
    MLflow creates and migrates a new SQLite store when a client first opens it, without a lock, and processes
    that open one at once (a sweep's workers, a trial and its study's parent run) failed with `table ... already
    exists` or a migration that found no row, and could leave the store half made (3 processes: 7 of 9 failed)."""
    import fcntl
    import os

    from mlflow.tracking import MlflowClient

    db = sqlite_file(uri)
    if db is None:
        return MlflowClient(tracking_uri=uri)
    try:  # O_NOFOLLOW: never through a link planted in the runs folder
        fd = os.open(db.with_name(f".{db.name}.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:  # a folder this process cannot write: the store is there already, or MLflow says why
        return MlflowClient(tracking_uri=uri)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return MlflowClient(tracking_uri=uri)  # opens the store: the first one creates and migrates it
    finally:
        os.close(fd)


def experiment_for(client, uri: str, name: str) -> str:
    """The experiment's id, made when missing (a local store's artifacts beside its database)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    db = sqlite_file(uri)
    location = (db.parent / MLFLOW_ARTIFACTS).as_uri() if db is not None else None
    try:
        return client.create_experiment(name, artifact_location=location)
    except Exception:  # noqa: BLE001 - another process (a sweep's other trial) made it first
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


# ---------------------------------------------------------------- export after training
EXPORT_FORMATS = ("onnx", "torchscript", "openvino")  # Ultralytics' format names
EXPORTS = "exports"  # RUN_DIR/exports/<format>.json: each export's record (file, size, metrics, the difference)
EXPORT_TOLERANCE = 0.01  # the default: the largest |exported - best.pt| over the val metrics that still passes
