"""Sweep workers pinned to device groups (`yolo-orch sweep --devices-per-trial N`).

On a machine with G visible devices, G/N workers each own one group of N: GPUs through
CUDA_VISIBLE_DEVICES (the trial then trains on devices 0..N-1 of its group, planned by the scaler
for N devices), CPU cores through the worker's CPU affinity (inherited by its trials' processes,
with OMP_NUM_THREADS = N), the stand-in that runs on any machine. No torch: GPUs are counted from
CUDA_VISIBLE_DEVICES or `nvidia-smi -L`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from orchestrator.devices import DeviceSpec, visible_gpus
from orchestrator.errors import UserError


@dataclass(frozen=True)
class DeviceGroup:
    kind: str  # cuda | cpu
    ids: tuple[int, ...]

    @property
    def label(self) -> str:
        return f"{'GPU' if self.kind == 'cuda' else 'CPU'} {','.join(map(str, self.ids))}"

    def trial_devices(self, base: DeviceSpec) -> str:
        """GPUs: the group's N devices, as numbered inside its CUDA_VISIBLE_DEVICES; CPU: the job's own
        target (cpu or cpu:K), on the group's cores."""
        return ",".join(str(i) for i in range(len(self.ids))) if self.kind == "cuda" else base.text

    def env(self) -> dict[str, str]:
        ids = ",".join(map(str, self.ids))
        return {"CUDA_VISIBLE_DEVICES": ids} if self.kind == "cuda" else {"OMP_NUM_THREADS": str(len(self.ids))}


def visible(kind: str) -> list[int]:
    return sorted(os.sched_getaffinity(0)) if kind == "cpu" else visible_gpus()


def device_groups(base: DeviceSpec, per_trial: int) -> list[DeviceGroup]:
    """The groups of `per_trial` devices of the base job's kind on this machine; UserError when the
    kind cannot be pinned or `per_trial` does not divide what is visible."""
    if base.kind not in ("cpu", "cuda") or base.nodes > 1:
        raise UserError(f"--devices-per-trial: pins GPUs or CPU cores of one machine; the base job's target "
                        f"'{base.text}' is neither")
    found = visible(base.kind)
    what = "GPUs" if base.kind == "cuda" else "CPU cores"
    if not found or len(found) % per_trial:
        raise UserError(f"--devices-per-trial: {per_trial} does not divide the {len(found)} {what} visible here "
                        f"({','.join(map(str, found)) or 'none'})")
    return [DeviceGroup(base.kind, tuple(found[i:i + per_trial])) for i in range(0, len(found), per_trial)]
