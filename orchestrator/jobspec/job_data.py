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


def describe_data(job: LoadedJob) -> DataInfo:
    """The job's dataset: classes, training images and a label check (jobspec/dataset.py). Label problems
    are UserErrors here, before anything is written, not a failure mid-run."""
    data, task = job.spec.data, job.spec.task
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
