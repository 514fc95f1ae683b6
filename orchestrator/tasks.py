"""Ultralytics' training tasks: what differs between them for the orchestrator, in one place. A leaf:
imports nothing (the generator, the spec, the scaler, the CLI and the sweep read it).

Each task trains with its own Ultralytics trainer (`YOLO(model, task=...)` picks it), reads its own
label format (data/synth.py, jobspec/dataset.py) and reports its own metrics; Ultralytics' `fitness`,
what best.pt and a sweep's default objective follow, is the task's: detect and obb mAP50-95 of the
boxes, segment and pose the box plus the mask or keypoint mAP50-95, classify the mean of top-1 and
top-5 accuracy, semantic the mean IoU over the classes, depth delta1 (the share of pixels whose predicted
depth is within a factor 1.25 of the truth). Semantic segmentation arrived in Ultralytics 8.4.52, depth
estimation in 8.4.104 (scaling/releases.py refuses them on an older release).
"""

from __future__ import annotations

TASKS = ("detect", "segment", "pose", "obb", "classify", "semantic", "depth")

# The model a task's examples build (from yaml: no weights). YOLO11 where yolo-orch's evidence was measured;
# semantic and depth heads exist only in the YOLO26 family (Ultralytics ships no yolo11 -sem or -depth yaml).
EXAMPLE_MODELS = {"detect": "yolo11n.yaml", "segment": "yolo11n-seg.yaml", "pose": "yolo11n-pose.yaml",
                  "obb": "yolo11n-obb.yaml", "classify": "yolo11n-cls.yaml", "semantic": "yolo26n-sem.yaml",
                  "depth": "yolo26n-depth.yaml"}

_BOX = ("metrics/precision(B)", "metrics/recall(B)", "metrics/mAP50(B)", "metrics/mAP50-95(B)")
# Every metric key a task's validation reports (results.csv, the `epoch` events, summary.json).
METRICS = {
    "detect": _BOX,
    "obb": _BOX,
    "segment": _BOX + tuple(k.replace("(B)", "(M)") for k in _BOX),
    "pose": _BOX + tuple(k.replace("(B)", "(P)") for k in _BOX),
    "classify": ("metrics/accuracy_top1", "metrics/accuracy_top5"),
    "semantic": ("metrics/mIoU", "metrics/pixel_acc"),
    "depth": ("metrics/delta1", "metrics/delta2", "metrics/delta3", "metrics/abs_rel", "metrics/rmse",
              "metrics/silog"),
}
# The metrics where lower is better (depth's errors); every other metric is better higher, every loss lower.
LOWER_IS_BETTER = frozenset({"metrics/abs_rel", "metrics/rmse", "metrics/silog"})
# Every loss a task's trainer logs, without the train/ or val/ prefix.
LOSSES = {
    "detect": ("box_loss", "cls_loss", "dfl_loss"),
    "obb": ("box_loss", "cls_loss", "dfl_loss", "angle_loss"),
    "segment": ("box_loss", "seg_loss", "cls_loss", "dfl_loss", "sem_loss"),
    "pose": ("box_loss", "pose_loss", "kobj_loss", "cls_loss", "dfl_loss"),
    "classify": ("loss",),
    "semantic": ("ce_loss", "dice_loss", "aux_loss"),
    "depth": ("dlog_loss", "dgrad_loss"),
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
    "semantic": (("pixel acc", "metrics/pixel_acc"), ("mIoU", "metrics/mIoU")),
    "depth": (("abs rel", "metrics/abs_rel"), ("delta1", "metrics/delta1")),
}
# A sweep objective's short names.
METRIC_ALIASES = {
    "mAP50-95": "metrics/mAP50-95(B)", "mAP50": "metrics/mAP50(B)",
    "precision": "metrics/precision(B)", "recall": "metrics/recall(B)",
    "mask-mAP50-95": "metrics/mAP50-95(M)", "mask-mAP50": "metrics/mAP50(M)",
    "pose-mAP50-95": "metrics/mAP50-95(P)", "pose-mAP50": "metrics/mAP50(P)",
    "top1": "metrics/accuracy_top1", "top5": "metrics/accuracy_top5",
    "mIoU": "metrics/mIoU", "pixel-acc": "metrics/pixel_acc",
    "delta1": "metrics/delta1", "abs-rel": "metrics/abs_rel", "rmse": "metrics/rmse",
}
# The loss each task's trainer minimises, per optimizer step: detect, segment, pose and obb return
# `loss * batch_size` (a SUM over the images of a micro-batch); semantic and depth too (their per-pixel mean
# over the micro-batch times its size: SemanticSegmentationLoss `total * preds.shape[0]`, DepthLoss26
# `loss * pred_depth.shape[0]`); classify returns F.cross_entropy(reduction="mean") (a MEAN). scaling/ models
# what that does to the step.
MEAN_LOSS_TASKS = frozenset({"classify"})


def task_of_keys(metrics) -> str:
    """The task whose metric keys these are (a summary or an epoch event: the CLI shows a run without
    reading its job)."""
    keys = set(metrics or ())
    for task in ("classify", "segment", "pose", "semantic", "depth"):
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
