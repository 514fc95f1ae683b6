"""Ultralytics' training tasks: what differs between them for the orchestrator, in one place. A leaf:
imports nothing (the generator, the spec, the scaler, the CLI and the sweep read it).

Each task trains with its own Ultralytics trainer (`YOLO(model, task=...)` picks it), reads its own
label format (data/synth.py, jobspec/dataset.py) and reports its own metrics; Ultralytics' `fitness`,
what best.pt and a sweep's default objective follow, is the task's: detect and obb mAP50-95 of the
boxes, segment and pose the box plus the mask or keypoint mAP50-95, classify the mean of top-1 and
top-5 accuracy.
"""

from __future__ import annotations

TASKS = ("detect", "segment", "pose", "obb", "classify")

EXAMPLE_MODELS = {"detect": "yolo11n.yaml", "segment": "yolo11n-seg.yaml", "pose": "yolo11n-pose.yaml",
                  "obb": "yolo11n-obb.yaml", "classify": "yolo11n-cls.yaml"}

_BOX = ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)")
# Every metric key a task's validation reports (results.csv, the `epoch` events, summary.json).
METRICS = {
    "detect": _BOX,
    "obb": _BOX,
    "segment": _BOX + tuple(k.replace("(B)", "(M)") for k in _BOX),
    "pose": _BOX + tuple(k.replace("(B)", "(P)") for k in _BOX),
    "classify": ("metrics/accuracy_top1", "metrics/accuracy_top5"),
}
# Every loss a task's trainer logs, without the train/ or val/ prefix.
LOSSES = {
    "detect": ("box_loss", "cls_loss", "dfl_loss"),
    "obb": ("box_loss", "cls_loss", "dfl_loss", "angle_loss"),
    "segment": ("box_loss", "seg_loss", "cls_loss", "dfl_loss", "sem_loss"),
    "pose": ("box_loss", "pose_loss", "kobj_loss", "cls_loss", "dfl_loss"),
    "classify": ("loss",),
}
# What a summary and a progress bar show (label, key), the headline last.
HEADLINE = {
    "detect": (("mAP50", "metrics/mAP50(B)"), ("mAP50-95", "metrics/mAP50-95(B)")),
    "obb": (("mAP50", "metrics/mAP50(B)"), ("mAP50-95", "metrics/mAP50-95(B)")),
    "segment": (("box mAP50-95", "metrics/mAP50-95(B)"), ("mask mAP50", "metrics/mAP50(M)"),
                ("mask mAP50-95", "metrics/mAP50-95(M)")),
    "pose": (("box mAP50-95", "metrics/mAP50-95(B)"), ("pose mAP50", "metrics/mAP50(P)"),
             ("pose mAP50-95", "metrics/mAP50-95(P)")),
    "classify": (("top-5", "metrics/accuracy_top5"), ("top-1", "metrics/accuracy_top1")),
}
# A sweep objective's short names.
METRIC_ALIASES = {
    "mAP50-95": "metrics/mAP50-95(B)", "mAP50": "metrics/mAP50(B)",
    "precision": "metrics/precision(B)", "recall": "metrics/recall(B)",
    "mask-mAP50-95": "metrics/mAP50-95(M)", "mask-mAP50": "metrics/mAP50(M)",
    "pose-mAP50-95": "metrics/mAP50-95(P)", "pose-mAP50": "metrics/mAP50(P)",
    "top1": "metrics/accuracy_top1", "top5": "metrics/accuracy_top5",
}
# The loss each task's trainer minimises, per optimizer step: detect, segment, pose and obb return
# `loss * batch_size` (a SUM over the images of a micro-batch); classify returns
# F.cross_entropy(reduction="mean") (a MEAN). scaling/ models what that does to the step.
MEAN_LOSS_TASKS = frozenset({"classify"})


def task_of_keys(metrics) -> str:
    """The task whose metric keys these are (a summary or an epoch event: the CLI shows a run without
    reading its job)."""
    keys = set(metrics or ())
    for task in ("classify", "segment", "pose"):
        if keys & set(METRICS[task]) - set(_BOX):
            return task
    return "detect"


def headline(metrics: dict) -> list[tuple[str, object]]:
    """(label, value) of the task's headline metrics in `metrics` (None where missing)."""
    return [(label, (metrics or {}).get(key)) for label, key in HEADLINE[task_of_keys(metrics)]]


def metric_keys(task: str) -> tuple[str, ...]:
    """Every key `task` reports: its validation metrics, then its val/ and train/ losses."""
    return METRICS[task] + tuple(f"{split}/{loss}" for loss in LOSSES[task] for split in ("val", "train"))


def all_metric_keys() -> tuple[str, ...]:
    """Every task's keys once, all the metrics before the losses."""
    keys = [k for task in TASKS for k in METRICS[task]] + [k for task in TASKS for k in metric_keys(task)]
    return tuple(dict.fromkeys(keys))
