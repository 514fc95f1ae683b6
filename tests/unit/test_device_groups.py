"""`sweep --devices-per-trial N`: the device groups its workers are pinned to (no torch, no GPU needed:
GPUs are read from CUDA_VISIBLE_DEVICES here; the real pinning runs in tests/e2e/test_sweep_groups.py)."""

from __future__ import annotations

import os

import pytest

from orchestrator.devices import parse_devices
from orchestrator.errors import UserError
from orchestrator.sweep.device_groups import device_groups


def test_gpus_are_split_into_groups_each_trial_numbering_its_own_from_zero(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    groups = device_groups(parse_devices("0"), 2)
    assert [g.ids for g in groups] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert groups[1].env() == {"CUDA_VISIBLE_DEVICES": "2,3"} and groups[1].label == "GPU 2,3"
    assert groups[1].trial_devices(parse_devices("0")) == "0,1"  # the scaler plans 2 devices


def test_cpu_cores_are_the_stand_in(monkeypatch):
    cores = sorted(os.sched_getaffinity(0))
    groups = device_groups(parse_devices("cpu"), 1)
    assert [g.ids for g in groups] == [(c,) for c in cores]
    assert groups[0].env() == {"OMP_NUM_THREADS": "1"} and groups[0].trial_devices(parse_devices("cpu")) == "cpu"


@pytest.mark.parametrize("devices, per_trial, visible, message", [
    ("0", 3, "0,1,2,3", "--devices-per-trial: 3 does not divide the 4 GPUs visible here (0,1,2,3)"),
    ("0", 1, "", "--devices-per-trial: 1 does not divide the 0 GPUs visible here (none)"),
    ("xla:cpu", 1, "0", "--devices-per-trial: pins GPUs or CPU cores of one machine; the base job's target 'xla:cpu'"),
    ("2x4", 4, "0,1,2,3", "--devices-per-trial: pins GPUs or CPU cores of one machine; the base job's target '2x4'"),
])
def test_groups_that_cannot_be_made_are_one_line(monkeypatch, devices, per_trial, visible, message):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with pytest.raises(UserError) as exc:
        device_groups(parse_devices(devices), per_trial)
    assert len(exc.value.problems) == 1 and exc.value.problems[0].startswith(message), exc.value.problems


def test_gpus_are_counted_from_the_environment_else_nvidia_smi(monkeypatch, tmp_path):
    """One count for the sweep's groups and `yolo-orch train`'s empty device (Ultralytics' first GPU)."""
    from orchestrator.devices import visible_gpus
    from orchestrator.jobspec.from_args import default_device

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert (visible_gpus(), default_device()) == ([], "cpu")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert (visible_gpus(), default_device()) == ([2, 3], "0")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    smi = tmp_path / "nvidia-smi"  # the driver's tool, at the process boundary: no GPU here
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-a)'\necho 'GPU 1: NVIDIA H100 (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert (visible_gpus(), default_device()) == ([0, 1], "0")
    smi.write_bytes(b"\x7fELF not a program")  # a broken driver install: exec fails
    assert (visible_gpus(), default_device()) == ([], "cpu")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert (visible_gpus(), default_device()) == ([], "cpu")
