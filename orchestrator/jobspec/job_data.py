"""The job's dataset as the plan sees it: its yaml (or a generated dataset's cache folder), classes,
training images and the label check of jobspec/dataset.py, made once per job and shared by every target
and sweep trial planned from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.data import dataset_path, synth_nc
from orchestrator.data.cache import synth_dir
from orchestrator.jobspec import dataset
from orchestrator.errors import UserError
from orchestrator.jobspec.job import SynthData
from orchestrator.jobspec.yamlio import read_yaml_file

if TYPE_CHECKING:
    from orchestrator.jobspec.loader import LoadedJob


@dataclass
class DataInfo:
    yaml_path: Path  # the data.yaml (classify: the dataset folder); synth data: generated at submit
    nc: int | None
    train_images: int | None
    synth: SynthData | None = None
    root: Path | None = None  # set when the yaml's `path:` is relative: the run's data.yaml makes it absolute
    warnings: list[str] = field(default_factory=list)  # e.g. images without labels (background)
    coco: dict[str, list[str]] | None = None  # COCO JSON: split -> [annotation file, images folder], converted at submit
    ndjson: str | None = None  # an NDJSON file, converted at submit
    digest: str | None = None  # COCO or NDJSON: the sha256 of the source files (and images folders) read


def describe_data(job: LoadedJob) -> DataInfo:
    """The job's dataset: classes, training images and a label check (jobspec/dataset.py). Label problems
    are UserErrors here, before anything is written, not a failure mid-run."""
    data, task = job.spec.data, job.spec.task
    if not isinstance(data, str) and data.coco is not None:
        return describe_coco(job)
    if not isinstance(data, str) and data.ndjson is not None:
        return describe_ndjson(job)
    if not isinstance(data, str):
        cfg = data.synth
        return DataInfo(dataset_path(synth_dir(cfg.model_dump(), task), task), synth_nc(task, cfg.classes), cfg.images,
                        synth=cfg)
    path = job.resolve_path(data).resolve()
    if task == "classify":
        found = dataset.scan_folders(path)
        if found.problems:
            raise UserError(found.problems)
        return DataInfo(path, found.nc, found.train_images, warnings=found.warnings)
    cfg = read_yaml_file(path, "dataset yaml")
    names = cfg.get("names")
    nc = len(names) if isinstance(names, (list, dict)) else cfg.get("nc")
    found = dataset.scan(cfg, path, nc, task)
    if found.problems:
        raise UserError(found.problems)
    root = found.root if dataset.relative_root(cfg) else None
    return DataInfo(path, dataset.trained_classes(task, cfg, nc), found.train_images, root=root,
                    warnings=found.warnings)


# what a task needs of COCO annotations: the shapes that serve (jobspec/coco.py's names), how a refusal says it
COCO_NEEDS = {"segment": ({"polygon", "rle"}, "polygons or RLE masks"), "pose": ({"keypoints"}, "keypoints")}


def describe_coco(job: LoadedJob) -> DataInfo:
    """COCO JSON read and checked (jobspec/coco.py); the plan names the converted copy submit makes."""
    from orchestrator.data.cache import cache_dir
    from orchestrator.jobspec.coco import coco_splits, read_coco
    from orchestrator.jobspec.coco_convert import converted_yaml

    task, splits = job.spec.task, coco_splits(job)
    read = read_coco(splits)
    if task in COCO_NEEDS and not COCO_NEEDS[task][0] & read.shapes:
        raise UserError(f"data.coco: a {task} model needs annotations with {COCO_NEEDS[task][1]}; these hold "
                        f"{', '.join(sorted(read.shapes)) or 'none'}")
    return DataInfo(converted_yaml(cache_dir() / "datasets", read), len(read.names), read.train_images,
                    warnings=list(read.warnings), digest=read.digest,
                    coco={split: [str(ann), str(images)] for split, (ann, images) in splits.items()})


def describe_ndjson(job: LoadedJob) -> DataInfo:
    """An NDJSON file read and checked (jobspec/ndjson.py); the plan names the converted copy submit makes."""
    from orchestrator.data.cache import cache_dir
    from orchestrator.jobspec.ndjson import read_ndjson
    from orchestrator.jobspec.ndjson_convert import converted_yaml

    path = job.resolve_path(job.spec.data.ndjson).resolve()
    read = read_ndjson(path)
    if read.task != job.spec.task:
        raise UserError(f"data.ndjson: {path} is a {read.task} dataset; the model trains {job.spec.task} (give a "
                        f"{read.task} model, or `task: {read.task}`)")
    return DataInfo(converted_yaml(cache_dir() / "datasets", read), len(read.names), read.train_images,
                    warnings=list(read.warnings), ndjson=str(path), digest=read.digest)
