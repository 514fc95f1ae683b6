"""SPMD over several XLA devices (`xla:cpu:N`: N virtual XLA:CPU devices in one process, as on a
TPU's cores): the step on N devices is the same computation as one device with the whole batch
(BatchNorm included), one compiled step graph whatever the box counts, through `submit` like every
other target."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from conftest import REPO, run_cli, write_job

pytestmark = [pytest.mark.slow, pytest.mark.xla,
              pytest.mark.skipif(importlib.util.find_spec("torch_xla") is None, reason="torch_xla is not installed")]

TINY = str(REPO / "tests" / "assets" / "tiny-det.yaml")


def train(tmp_path: Path, devices: str) -> dict:
    job = write_job(tmp_path, filename=f"job-{devices.replace(':', '-')}.yaml", model=TINY, imgsz=32, epochs=2,
                    data={"synth": {"images": 16, "val_images": 4, "classes": 2, "imgsz": 32, "seed": 1}},
                    hyp={"optimizer": "SGD", "lr0": 0.01, "warmup_epochs": 0},
                    reference={"devices": 1, "batch": 4, "nbs": 4}, target={"devices": "cpu", "batch": 4},
                    overrides={"workers": 0, "plots": False})
    result = run_cli("submit", job, "--devices", devices, "--json", cwd=tmp_path, env={"PJRT_DEVICE": "CPU"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def train_losses(run_dir: str) -> list[dict[str, float]]:
    rows = list(csv.DictReader(open(Path(run_dir) / "results.csv")))
    return [{k.strip(): float(v) for k, v in row.items() if k.strip().startswith("train/")} for row in rows]


def test_four_devices_train_what_one_device_trains_with_the_whole_batch(tmp_path):
    import torch

    from orchestrator.rundir import load_resolved

    one, four = train(tmp_path, "xla:cpu"), train(tmp_path, "xla:cpu:4")
    plan = load_resolved(Path(four["run_dir"])).plan
    assert plan.devices == "xla:cpu:4" and plan.world_size == 4 and plan.launcher == "xla"
    assert plan.effective["batch_per_device"] == 1
    assert four["summary"]["xla"]["xla/world_size"] == 4

    for a, b in zip(train_losses(one["run_dir"]), train_losses(four["run_dir"]), strict=True):
        assert a.keys() == b.keys()
        for key in a:  # float reduction order only
            assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-6), key
    weights = [torch.load(Path(r["run_dir"]) / "weights" / "last.pt", weights_only=False)["model"].float().state_dict()
               for r in (one, four)]
    worst = max(float((weights[0][k] - weights[1][k]).abs().max()) for k in weights[0]
                if weights[0][k].is_floating_point())
    assert worst < 1e-3  # last.pt holds half-precision weights (Ultralytics' strip_optimizer)

    for run in (one, four):  # one step graph, compiled at step 0, whatever the box counts
        xla = run["summary"]["xla"]
        assert xla["xla/compile_steps"] == [0], xla
        assert len(set(xla["xla/batch_boxes"])) > 1
