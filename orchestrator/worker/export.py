"""One export of a finished run, in a process of its own (an exporter that crashes or leaks memory takes
nothing with it, and the trained weights are only read):

    python -m orchestrator.worker.export RUN_DIR FORMAT

best.pt is exported to FORMAT (Ultralytics' exporter, on the CPU, at the run's imgsz), the exported file is
validated on the job's val split through its own runtime (onnxruntime, TorchScript, OpenVINO), and best.pt
is validated the same way, in the same process, so the difference is the export's alone (the training's
final validation ran with the training's own settings). The record, RUN_DIR/exports/FORMAT.json: the file,
its size, both metrics, the largest difference over the val metrics, the tolerance and whether it holds;
or the error. The run's MLflow run (mlflow.json) gets the file and the metrics. Exit 0 when the record is
written (a failed export is a record, not a crash), 2 on bad arguments."""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from orchestrator.rundir import BEST, ResolvedRun, load_resolved, write_json_atomic
from orchestrator.rundir.tracking import EXPORT_FORMATS, EXPORTS, MLFLOW_RECORD, mlflow_client
from orchestrator.worker.offline import disable_integrations, prepare_env

REFERENCE = "best_pt_val.json"  # best.pt validated as the exports are (cached: one validation per run)


def export_record(run_dir: Path, fmt: str) -> dict[str, Any]:
    """Export, validate, compare; the record (also written to RUN_DIR/exports/FORMAT.json)."""
    resolved = load_resolved(run_dir)
    record: dict[str, Any] = {"format": fmt, "tolerance": resolved.job.export_tolerance, "ok": False}
    started = time.time()
    try:
        prepare_env()
        import ultralytics  # noqa: F401 - its settings exist before the integrations are switched off

        disable_integrations()
        reference = reference_metrics(run_dir, resolved)
        made = export_file(run_dir, resolved, fmt)
        metrics = validate(made, resolved)
        record.update(file=str(made), size_bytes=size_of(made), metrics=metrics, best_pt=reference,
                      difference=largest_difference(metrics, reference), compared=comparable(reference))
        record["ok"] = record["difference"] <= record["tolerance"]
    except Exception as exc:  # noqa: BLE001 - a failed export is reported, never a lost run
        record["error"] = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:300]}"
        print(traceback.format_exc(), file=sys.stderr, flush=True)
    record["wall_s"] = round(time.time() - started, 1)
    write_json_atomic(run_dir / EXPORTS / f"{fmt}.json", record)
    log_to_mlflow(run_dir, record)
    return record


def val_args(resolved: ResolvedRun) -> dict[str, Any]:
    """The validation every export and best.pt get: the run's data, imgsz and task, on the CPU, and square
    letterboxed images: an exported file of fixed input shape validates without rectangular batches
    (Ultralytics' validator turns `rect` off for it), and best.pt validated with them (its default) scored
    up to 0.017 apart from the same weights exported (quickstart-tracking: mAP50-95 0.817 against 0.828)."""
    train = resolved.plan.train_args
    return {"data": train["data"], "imgsz": train.get("imgsz", 640), "batch": max(1, int(resolved.plan.batch_per_device)),
            "device": "cpu", "plots": False, "verbose": False, "split": "val", "workers": 0, "rect": False}


def reference_metrics(run_dir: Path, resolved: ResolvedRun) -> dict[str, float]:
    import json

    # kept with the arguments it was validated with: a cache from other ones (before rect=False, say) is
    # validated again rather than compared with exports validated another way
    cached, args = run_dir / EXPORTS / REFERENCE, val_args(resolved)
    if cached.is_file():
        known = json.loads(cached.read_text())
        if known.get("val_args") == args:
            return known["metrics"]
    metrics = validate(run_dir / BEST, resolved)
    write_json_atomic(cached, {"val_args": args, "metrics": metrics})
    return metrics


def export_file(run_dir: Path, resolved: ResolvedRun, fmt: str) -> Path:
    """best.pt exported to `fmt` into RUN_DIR/exports/ (Ultralytics writes beside the weights: moved)."""
    from ultralytics import YOLO

    made = Path(YOLO(str(run_dir / BEST), task=resolved.job.task).export(
        format=fmt, imgsz=resolved.plan.train_args.get("imgsz", 640), device="cpu"))
    target = run_dir / EXPORTS / made.name
    if target.exists():
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    shutil.move(str(made), str(target))
    return target


def validate(model_path: Path, resolved: ResolvedRun) -> dict[str, float]:
    """Validated into a folder of its own that goes with it (Ultralytics would make runs/TASK/val-N in the
    working folder, wherever `--runs-dir` points)."""
    import tempfile

    from ultralytics import YOLO

    with tempfile.TemporaryDirectory(prefix="yolo-orch-val-") as scratch:
        results = YOLO(str(model_path), task=resolved.job.task).val(**val_args(resolved), project=scratch, name="val")
    return {k: round(float(v), 6) for k, v in results.results_dict.items() if k.startswith("metrics/")}


def comparable(reference: dict[str, float]) -> bool:
    """Whether best.pt's scores can tell a faithful export from a broken one: not when it scores 0 on every val
    metric (an untrained or collapsed model), where any export also scores 0 and a difference of 0 says nothing."""
    return any(value != 0 for value in reference.values())


def largest_difference(metrics: dict[str, float], reference: dict[str, float]) -> float:
    shared = set(metrics) & set(reference)
    return round(max((abs(metrics[k] - reference[k]) for k in shared), default=0.0), 6)


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def log_to_mlflow(run_dir: Path, record: dict[str, Any]) -> None:
    """The run's MLflow run (when it has one) gets the exported file and its metrics; a failure is one line."""
    import json

    path = run_dir / MLFLOW_RECORD
    if not path.is_file():
        return
    known = json.loads(path.read_text())
    from orchestrator.worker.mlflow_logger import HTTP_DEFAULTS, metric_name, unreachable

    for key, value in HTTP_DEFAULTS.items():  # a stopped server costs one failed request, not minutes of retries
        os.environ.setdefault(key, value)
    down = unreachable(str(known.get("tracking_uri") or ""))
    if down:
        print(f"yolo-orch: warning: MLflow could not record the {record['format']} export: {down}", file=sys.stderr,
              flush=True)
        return
    try:
        client = mlflow_client(known["tracking_uri"])
        fmt = record["format"]
        for key, value in (record.get("metrics") or {}).items():
            client.log_metric(known["run_id"], metric_name(f"export/{fmt}/{key}"), value)
        if "difference" in record:
            client.log_metric(known["run_id"], f"export/{fmt}/difference", record["difference"])
        client.set_tag(known["run_id"], f"export.{fmt}", "ok" if record["ok"] else record.get("error", "beyond tolerance"))
        if record.get("file"):
            made = Path(record["file"])
            if made.is_dir():  # OpenVINO's model folder, kept whole under its name
                client.log_artifacts(known["run_id"], str(made), f"exports/{made.name}")
            else:
                client.log_artifact(known["run_id"], str(made), "exports")
    except Exception as exc:  # noqa: BLE001
        print(f"yolo-orch: warning: MLflow could not record the {record['format']} export: {type(exc).__name__}: {exc}",
              file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[1] not in EXPORT_FORMATS:
        print(f"usage: python -m orchestrator.worker.export RUN_DIR {{{','.join(EXPORT_FORMATS)}}}", file=sys.stderr)
        return 2
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # exports and their validation run on the CPU
    export_record(Path(argv[0]).resolve(), argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
