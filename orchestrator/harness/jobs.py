"""The jobs and sweeps the tests and campaigns write: tiny (a 2-class 64 px generated dataset, one epoch
of a detector of a few thousand weights on the CPU) so that the suite stays fast on 2 cores; a test changes
what it is about (yolo11n where the model's size matters: a checkpoint that fills a disk, epochs long enough
to strike in)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import yaml

from orchestrator.harness.cli import REPO

TINY_MODEL = REPO / "tests" / "assets" / "tiny-det.yaml"  # a detect model of a few thousand weights
# The same Ultralytics trainer, loss, callbacks and checkpoints as yolo11n's, at a third of a training's time
# beyond the start-up: a 2-epoch run took 4.9 s against 7.5 s (one process, the 2-core Zen 2 of docs/testing.md)
TINY_JOB = {
    "name": "tiny",
    "model": str(TINY_MODEL),
    "data": {"synth": {"images": 16, "val_images": 8, "classes": 2, "imgsz": 64, "seed": 1}},
    "epochs": 1,
    "imgsz": 64,
    "seed": 0,
    "hyp": {"preset": "scratch-default", "optimizer": "AdamW", "lr0": 0.002},
    "reference": {"devices": 1, "batch": 8},
    "target": {"devices": "cpu"},
    "wandb": {"mode": "disabled"},
    "overrides": {"workers": 0, "plots": False},
}

# What users run: the quickstart's `wandb:` section (offline with no API key configured). The tests of
# resume, requeue and the chaos campaign run with it; TINY_JOB disables W&B for tests about other things.
DEFAULT_WANDB = {"project": "yolo-orch-tests"}


def write_job(folder: Path, job: dict | None = None, filename: str = "job.yaml", **changes) -> Path:
    """`job` (default TINY_JOB) with `changes` over its top-level fields, as folder/filename."""
    data = json.loads(json.dumps(job or TINY_JOB))
    data.update(changes)
    path = folder / filename
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_text(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


# The pruned trial is guaranteed by the parameters, not by luck: the box loss gain multiplies
# val/box_loss (tiny-det after one epoch: 0.36 at box 0.5, 36.5 at box 50), and the threshold pruner cuts any
# trial whose val/box_loss exceeds 10 at its first epoch. Trial 1 is enqueued with box 50.
SWEEP = {
    "study": "tiny-sweep",
    "base": "job.yaml",
    "space": {"hyp": {"box": {"choices": [0.5, 50.0]}, "lr0": {"low": 1.0e-3, "high": 1.0e-2, "log": True}}},
    "objective": {"metric": "val/box_loss"},
    "sampler": {"name": "tpe", "seed": 0},
    "pruner": {"name": "threshold", "upper": 10.0},
    "budget": {"n_trials": 4},
    "heartbeat": {"interval": 2},
    "enqueue": [{"hyp": {"box": 0.5, "lr0": 0.002}}, {"hyp": {"box": 50.0, "lr0": 0.002}}],
}


def write_sweep(folder: Path, name: str = "sweep.yaml", job_changes: dict | None = None, **changes) -> Path:
    """SWEEP with `changes`, over a two-epoch TINY_JOB (with `job_changes`) written beside it as job.yaml."""
    write_job(folder, **{"epochs": 2, **(job_changes or {})})
    data = json.loads(json.dumps(SWEEP))
    data.update(changes)
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def space(**hyp) -> dict:
    return {"hyp": hyp}
