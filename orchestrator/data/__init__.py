"""Generated datasets (data/synth.py: shapes with boxes, deterministic per seed; data/cache.py: their
folders in the tool's cache). Imports nothing of the tool but the task table: the orchestrator generates
a job's data before training, a Kaggle session inside its kernel."""

# Bounds of a generated dataset (also `yolo-orch data synth`): a 4096 px image is 48 MiB in memory,
# 100,000 of them at 128 px about 2 GB on disk.
SYNTH_MAX_IMAGES = 100_000
SYNTH_MAX_IMGSZ = 4096


def dataset_path(out_dir, task: str):
    """What a job's `data` names for a generated dataset in `out_dir` (a pathlib.Path): its data.yaml,
    or the folder itself for classify (Ultralytics' classify `data` is a folder of class folders)."""
    return out_dir if task == "classify" else out_dir / "data.yaml"


def synth_nc(task: str, classes: int) -> int:
    """The classes a generated dataset's data.yaml names for `classes` shapes: semantic adds the background
    (class 0), depth has one output (metres per pixel); every other task one class per shape."""
    return classes + 1 if task == "semantic" else 1 if task == "depth" else classes
