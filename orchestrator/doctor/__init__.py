"""`yolo-orch doctor`: environment checks, each pass / warn / fail with the fix.

Heavy imports (torch, torchvision, torch_xla, sqlalchemy) happen only in short-lived
subprocesses: a broken install cannot crash the doctor, and the CLI stays light.
Secrets are never printed: the W&B key is reported as configured or not, storage URLs
with the password hidden."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable

from orchestrator.doctor.checks import FAIL, Check
from orchestrator.doctor.cpu import check_cpu_bf16
from orchestrator.doctor.gpu_processes import check_gpu_processes
from orchestrator.doctor.runtime import check_cuda, check_torch, check_xla, probe_runtime
from orchestrator.doctor.services import (check_disk, check_registry, check_storage, check_ultralytics_offline,
                                          check_wandb)


def run_checks(runs_dir: Path, storage: str | None = None, nvidia_smi: str | None = None) -> list[Check]:
    probed = probe_runtime()
    info = probed["torch"]
    steps: list[Callable[[], Check]] = [
        lambda: check_torch(info),
        lambda: check_cuda(info),
        lambda: check_gpu_processes(runs_dir, nvidia_smi),
        lambda: check_xla(probed["xla"]),
        check_cpu_bf16,
        check_wandb,
        lambda: check_disk(runs_dir),
        check_ultralytics_offline,
        lambda: check_storage(storage),
        lambda: check_registry(runs_dir),
    ]
    checks = []
    for step in steps:
        try:
            checks.append(step())
        except Exception as exc:  # noqa: BLE001 - one broken check must not hide the others
            name = getattr(step, "__name__", "check").replace("check_", "")
            checks.append(Check(name, FAIL, f"the check itself failed: {type(exc).__name__}: {exc}", ""))
    return checks


def as_json(checks: list[Check]) -> list[dict]:
    return [asdict(c) for c in checks]
