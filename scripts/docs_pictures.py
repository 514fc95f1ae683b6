"""The pictures in docs/tracking.md, made from a real run of examples/quickstart-tracking.yaml as written
(MLflow in the runs folder's SQLite store, TensorBoard, ONNX and TorchScript exports), each page opened in
headless Chromium as a person would open it:

  .venv/bin/python scripts/docs_pictures.py            # about 10 minutes on 2 CPU cores
  .venv/bin/python scripts/docs_pictures.py --out /tmp/pictures --set epochs=3   # a quick look

mlflow-run.png (`mlflow ui` on sqlite:///runs/mlflow.db: the run's params, tags and metrics),
mlflow-metrics.png (its per-epoch validation curves), tensorboard.png (`tensorboard --logdir runs/`), ui-tracking.png
(the dashboard's run page: the tracking and export section). Nothing goes to the network: the servers listen
on loopback and the run's W&B stays offline."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import urllib.parse
from pathlib import Path

from orchestrator.harness.cli import REPO, submit_json
from orchestrator.harness.dashboard import Dashboard, find_browser, screenshot
from orchestrator.harness.services import MlflowServer, TensorBoardServer
from orchestrator.harness.tracking import mlflow_client

JOB = REPO / "examples" / "quickstart-tracking.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    parser.add_argument("--set", action="append", default=[], help="a job field for a quicker look: KEY=VALUE")
    parser.add_argument("--keep", type=Path, help="train here and keep the runs folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="yolo-orch-pictures-"))
    work.mkdir(parents=True, exist_ok=True)
    job = work / JOB.name
    shutil.copy(JOB, job)
    sets = [x for kv in args.set for x in ("--set", kv)]
    outcome = submit_json(job, *sets, cwd=work, env={"YOLO_ORCH_REGISTRY": str(work / "runs" / "registry.db")},
                          timeout=3600)
    summary = outcome["summary"]
    run_dir = Path(outcome["run_dir"])
    print(f"trained {run_dir} ({summary['state']}); exports: "
          f"{ {k: v.get('ok') for k, v in (summary.get('exports') or {}).items()} }")
    browser = find_browser()
    profile = work / "chrome"
    pictures(browser, profile, work / "runs", run_dir, summary["mlflow"], args.out)
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)


# The per-epoch validation curves in MLflow's metric page (the run's model-metrics tab lists the export
# metrics first); MLflow names a metric without parentheses (worker/mlflow_logger.py: metric_name)
MLFLOW_CURVES = ("metrics/mAP50-95B", "metrics/mAP50B", "metrics/precisionB", "metrics/recallB")


def metric_page(server: str, run, keys) -> str:
    """MLflow 3's metric page: its query holds JSON lists (runs, experiments, keys) and the metric as JSON."""
    q = lambda value: urllib.parse.quote(json.dumps(value))  # noqa: E731
    return (f"{server}/#/metric?runs={q([run.info.run_id])}&metric={q(keys[0])}"
            f"&experiments={q([run.info.experiment_id])}&plot_metric_keys={q(list(keys))}&x_axis=step")


def pictures(browser: str, profile: Path, runs: Path, run_dir: Path, mlflow: dict, out: Path) -> None:
    run = mlflow_client(mlflow["tracking_uri"]).get_run(mlflow["run_id"])
    server = MlflowServer(runs / "mlflow-ui", store=mlflow["tracking_uri"])
    try:
        page = f"{server.url}/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
        screenshot(browser, profile, page, out / "mlflow-run.png", budget_ms=15000, size="1400,1100")
        screenshot(browser, profile, metric_page(server.url, run, MLFLOW_CURVES), out / "mlflow-metrics.png",
                   budget_ms=40000, size="1400,900")
    finally:
        server.stop()
    board = TensorBoardServer(runs)
    try:
        screenshot(browser, profile, f"{board.url}/#timeseries", out / "tensorboard.png", budget_ms=15000,
                   size="1400,1000")
    finally:
        board.stop()
    ui = Dashboard(runs, browser, profile.parent)
    try:
        screenshot(browser, profile, f"{ui.url}/run/{run_dir.name}", out / "ui-tracking.png", size="1280,2600")
    finally:
        ui.stop()
    print(f"pictures in {out}")


if __name__ == "__main__":
    main()
