"""The tool's cache, and a generated dataset's folder in it, keyed by its settings and task, made when missing."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from orchestrator.data import dataset_path


def cache_dir() -> Path:
    """The tool's cache (generated datasets, the training process's Ultralytics config, the XLA
    compile cache; YOLO_ORCH_CACHE moves it)."""
    return Path(os.environ.get("YOLO_ORCH_CACHE", Path.home() / ".cache" / "yolo-orch")).expanduser()


def synth_dir(settings: dict[str, Any], task: str = "detect") -> Path:
    """The cache folder of a generated dataset (`settings`: the job's `data.synth`, every field; the same
    settings and task: the same folder)."""
    key = settings if task == "detect" else dict(settings, task=task)  # detect's folders kept
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir() / "datasets" / f"synth-{digest}"


def make_synth_data(settings: dict[str, Any], task: str = "detect") -> Path:
    """The generated dataset's data.yaml (classify: its folder), generated first when it is not there
    (the same settings and seed give the same images: a cleaned cache or another node loses nothing)."""
    folder = synth_dir(settings, task)
    if not dataset_path(folder, task).exists():
        from orchestrator.data.synth import generate_dataset

        generate_dataset(folder, images=settings["images"], val_images=settings["val_images"],
                         classes=settings["classes"], imgsz=settings["imgsz"], seed=settings["seed"], task=task)
    return dataset_path(folder, task)
