"""MLflow logging from the training process (rank 0 only), through `MlflowClient` (no global active run,
no atexit hooks). Imports mlflow lazily.

One MLflow run per yolo-orch run and store: its id is kept in the run directory (rundir.MLFLOW_RECORD), so a
resume, an OOM restart or a Kaggle session that continues the run logs to the same MLflow run. Epochs go
forward only: at start the logger reads the highest `epoch` step the store holds and logs the epochs the
run trained after it (events.jsonl), so an epoch trained again after a rewind keeps its first values and
none is logged twice. The store decided at run creation (orchestrator/tracking.py) is tried first; when
it cannot be reached or fails, the run logs to the runs folder's local store with one warning. A store
that fails mid-run costs nothing: one warning, then the rest of the run is not logged there (the next
start catches it up)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from orchestrator.rundir import BEST, ENV, RESOLVED, RESULTS, ResolvedRun, write_json_atomic
from orchestrator.rundir.tracking import MLFLOW_RECORD, experiment_for, mlflow_client
from orchestrator.worker import trackers
from orchestrator.worker.trackers import first_line
from orchestrator.worker.wandb_reach import tcp_unreachable

# MLflow's client retries a failing request 7 times with backoff (minutes per call): a training must not
# wait that long for its tracker. A user's own values win.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
# MLflow metric names allow letters, digits, '_', '-', '.', ' ', '/': Ultralytics' "metrics/mAP50-95(B)"
# becomes "metrics/mAP50-95B", as Ultralytics' own MLflow callback writes it.
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_\-. /]")
PARAM_MAX = 500  # characters of a param value kept (MLflow's limit is 6000; a long list says little more)


def metric_name(key: str) -> str:
    return _NOT_IN_A_NAME.sub("", key)


class MlflowLogger:
    name = "mlflow"

    def __init__(self, run_dir: Path, resolved: ResolvedRun):
        self.run_dir, self.resolved = Path(run_dir), resolved
        self.settings = read_record(run_dir).get("settings") or {}  # decided at run creation (orchestrator/tracking.py)
        self.client = None
        self.uri: str | None = None
        self.run_id: str | None = None
        self.logged_through = 0
        self.warnings: list[str] = []
        self.on_warning: Callable[[str], None] | None = None  # the run's events: the console and `show` say it

    # ------------------------------------------------------------ start

    def start(self) -> str | None:
        """Open (or continue) the run's MLflow run: its store, else the local fallback. Returns the one
        warning when the store it was asked for could not be used; None when nothing went wrong."""
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        if not self.settings.get("tracking_uri"):
            return self._warn(f"{self.run_dir / MLFLOW_RECORD} holds no MLflow settings: this run is not logged to MLflow")
        primary, fallback = self.settings["tracking_uri"], self.settings.get("fallback_uri")
        why = self._try(primary)
        if why is None:
            return None
        warning = f"MLflow store {primary} could not be used: {why}"
        if fallback and fallback != primary:
            again = self._try(fallback)
            if again is None:
                return self._warn(f"{warning}; logging to {fallback} instead")
            warning += f"; the local store failed too ({again})"
        return self._warn(f"{warning}: this run is not logged to MLflow")

    def _try(self, uri: str) -> str | None:
        """None when `uri`'s store took the run (the client ready); else why not, in one line."""
        why = unreachable(uri)
        if why is not None:
            return why
        try:
            client = mlflow_client(uri)
            run_id = self._open_run(client, uri)
            self.logged_through = last_step(client, run_id)
        except Exception as exc:  # noqa: BLE001 - MlflowException, RestException, OSError, SQLAlchemy errors...
            return f"{type(exc).__name__}: {first_line(exc)}"
        self.client, self.uri, self.run_id = client, uri, run_id
        return None

    def _open_run(self, client, uri: str) -> str:
        """The run's MLflow run in this store: the recorded one (set running again), else a new one."""
        record = read_record(self.run_dir)
        known = record.get("runs", {}).get(uri)
        if known:
            client.update_run(known, status="RUNNING")
            client.set_tag(known, "yolo_orch.attempt", str(int(record.get("attempts", {}).get(uri, 1)) + 1))
            self._set_tags(client, known)
            self._save(uri, known, record, attempt=int(record.get("attempts", {}).get(uri, 1)) + 1)
            return known
        experiment_id = experiment_for(client, uri, self.settings["experiment"])
        run = client.create_run(experiment_id, run_name=self.settings.get("run_name") or self.resolved.run_id,
                                tags={**self.settings.get("tags", {}), "yolo_orch.run_id": self.resolved.run_id,
                                      "yolo_orch.attempt": "1"})
        run_id = run.info.run_id
        self._save(uri, run_id, record, attempt=1)  # before anything else: a kill now still continues this run
        self._log_params(client, run_id)
        self._set_tags(client, run_id)
        return run_id

    def _save(self, uri: str, run_id: str, record: dict, attempt: int) -> None:
        record.setdefault("runs", {})[uri] = run_id
        record.setdefault("attempts", {})[uri] = attempt
        record["tracking_uri"], record["run_id"] = uri, run_id  # the store and run this attempt logs to
        write_json_atomic(self.run_dir / MLFLOW_RECORD, record)

    def _log_params(self, client, run_id: str) -> None:
        """What the run was planned with, once (MLflow params never change): the reference
        hyperparameters, the values passed to Ultralytics and what Ultralytics does with them."""
        from mlflow.entities import Param

        plan = self.resolved.plan
        values = {**{f"reference.{k}": v for k, v in plan.hyp.items()},
                  **{f"passed.{k}": v for k, v in plan.passed.items()},
                  **{f"effective.{k}": v for k, v in plan.effective.items()},
                  "policy": plan.policy, "epochs": plan.epochs, "batch": plan.batch, "nbs": plan.nbs,
                  "model": plan.train_args.get("model"), "imgsz": plan.train_args.get("imgsz"),
                  "seed": plan.train_args.get("seed"), "task": self.resolved.job.task}
        params = [Param(metric_name(k), str(v)[:PARAM_MAX]) for k, v in values.items() if v is not None]
        for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
            client.log_batch(run_id, params=params[start:start + 100])

    def _set_tags(self, client, run_id: str) -> None:
        """What may change from one attempt to the next (a resume onto other devices): tags."""
        from mlflow.entities import RunTag

        plan = self.resolved.plan
        tags = {"devices": plan.devices, "world_size": plan.world_size, "launcher": plan.launcher,
                "batch": plan.batch, "ultralytics": plan.ultralytics, "yolo_orch.run_dir": str(self.run_dir)}
        tags.update({f"reason.{i + 1}": line for i, line in enumerate(plan.reasons)})
        env = self.run_dir / ENV
        if env.is_file():
            facts = json.loads(env.read_text())
            tags.update({f"env.{k}": v for k, v in facts.items() if k != "cpu_affinity" and v not in (None, [], "")})
        client.log_batch(run_id, tags=[RunTag(metric_name(k), str(v)[:PARAM_MAX]) for k, v in tags.items()])

    # ------------------------------------------------------------ epochs and the end

    def started(self) -> bool:
        return self.client is not None

    def log_epoch(self, epoch: int, metrics: dict[str, Any]) -> None:
        if self.client is None or epoch <= self.logged_through:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        values = [Metric(metric_name(k), float(v), now, epoch) for k, v in metrics.items()
                  if isinstance(v, (int, float)) and not isinstance(v, bool)]
        values.append(Metric("epoch", float(epoch), now, epoch))
        try:
            client_log(self.client, self.run_id, values)
        except Exception as exc:  # noqa: BLE001 - a tracker never costs the training
            self._lost(f"MLflow logging stopped at epoch {epoch}: {type(exc).__name__}: {first_line(exc)}")
            return
        self.logged_through = epoch

    def finish(self, final: dict[str, Any], exit_code: int = 0) -> None:
        """The final metrics, the artifacts (best.pt, results.csv, job.resolved.yaml) and the run's status."""
        if self.client is None:
            return
        try:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            finals = [Metric(metric_name(f"final/{k}"), float(v), now, self.logged_through) for k, v in final.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)]
            client_log(self.client, self.run_id, finals)
            if exit_code == 0:
                for name, folder in ((BEST, "weights"), (RESULTS, None), (RESOLVED, None)):
                    if (self.run_dir / name).is_file():
                        self.client.log_artifact(self.run_id, str(self.run_dir / name), folder)
            self.client.set_terminated(self.run_id, status="FINISHED" if exit_code == 0 else "FAILED")
        except Exception as exc:  # noqa: BLE001
            self._lost(f"MLflow could not finish the run: {type(exc).__name__}: {first_line(exc)}")
        self.client = None

    def record(self) -> dict[str, Any]:
        """summary.json's `mlflow`: where the run was logged, and what went wrong."""
        return {"tracking_uri": self.uri, "run_id": self.run_id,
                "warnings": self.warnings}

    def _warn(self, message: str) -> str:
        self.warnings.append(message)
        return message

    def _lost(self, message: str) -> None:
        import sys

        self.client = None
        print(f"yolo-orch: warning: {message}", file=sys.stderr, flush=True)
        self._warn(message)
        if self.on_warning is not None:
            self.on_warning(message)



def client_log(client, run_id: str, metrics: list) -> None:
    for start in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per batch
        client.log_batch(run_id, metrics=metrics[start:start + 1000])


def read_record(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MLFLOW_RECORD
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def last_step(client, run_id: str) -> int:
    """The highest epoch the store holds for the run (0: none)."""
    return int(max((m.step for m in client.get_metric_history(run_id, "epoch")), default=0))


def unreachable(uri: str) -> str | None:
    """For an HTTP store: None when a TCP connection opens within the probe's timeout, else why not.
    Local and database stores: None (their client reports its own failure)."""
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return None
    return tcp_unreachable(parts.hostname or "localhost", parts.port or (443 if parts.scheme == "https" else 80))


def start_for_run(run_dir: Path, resolved: ResolvedRun, warn=None) -> MlflowLogger | None:
    """The run's MLflow logger, started (trackers.start); None when the job has no `mlflow` section. One that no
    store took stays, to record why. `warn(message)` receives the one warning."""
    if resolved.job.mlflow is None:
        return None
    return trackers.start(MlflowLogger(run_dir, resolved), warn)
