"""Device spec strings: where a job runs; and `visible_gpus()`, the GPUs this machine offers.

Grammar (one string, as in ``--devices`` and ``target.devices``):

    cpu         one CPU process
    cpu:N       N CPU processes, data-parallel over gloo
    0 | cuda:K  one GPU (index 0, or index K)
    0,1,2,3     these GPUs
    N           the first N GPUs (N >= 1; "0" means GPU 0, as in Ultralytics)
    MxN         M nodes with N GPUs each (torchrun, one per node)
    Mxcpu:N     M nodes with N CPU processes each (gloo; multi-node on machines without GPUs)
    tpu:N       N TPU cores (torch-xla: one process, SPMD over the cores)
    xla:cpu     one XLA:CPU device (the TPU code path on the host CPU)
    xla:cpu:N   N virtual XLA:CPU devices in one process, SPMD as on a TPU's cores
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from orchestrator.errors import UserError

KINDS = ("cpu", "cuda", "tpu", "xla_cpu")
XLA_KINDS = ("tpu", "xla_cpu")  # driven by torch-xla in one process: SPMD over the devices


class DeviceSpecError(UserError):
    """Text that is no device spec (the caller puts it under its field: `exc.under("--devices")`)."""


@dataclass(frozen=True)
class DeviceSpec:
    kind: str  # one of KINDS
    per_node: int  # processes per node
    nodes: int = 1
    gpu_ids: tuple[int, ...] = ()  # explicit CUDA indices, when given
    text: str = ""

    @property
    def world_size(self) -> int:
        return self.per_node * self.nodes

    @property
    def xla(self) -> bool:
        """Trained by the XLA backend (orchestrator/worker/xla): a TPU's cores or XLA:CPU devices."""
        return self.kind in XLA_KINDS

    @property
    def distributed(self) -> bool:
        """Several processes (torch.distributed). XLA devices are driven by one process (SPMD)."""
        return self.world_size > 1 and not self.xla

    @property
    def backend(self) -> str:
        """The launcher that starts it (orchestrator/launch): one process ("local"), one per device and
        node ("torchrun"), or torch-xla in one process ("xla")."""
        return "xla" if self.xla else "torchrun" if self.distributed else "local"

    def ultralytics_device(self) -> str:
        """The `device=` value for one Ultralytics process of this spec."""
        if self.kind == "cuda":
            if self.gpu_ids:
                return ",".join(str(i) for i in self.gpu_ids)
            return ",".join(str(i) for i in range(self.per_node))
        return "cpu"

    def __str__(self) -> str:
        return self.text


_USAGE = "expected cpu, cpu:N, 0, cuda:K, 0,1,2,3, N, MxN, Mxcpu:N, tpu:N, xla:cpu or xla:cpu:N"


def parse_devices(value: str | int) -> DeviceSpec:
    text = str(value).strip().lower()
    if not text:
        raise DeviceSpecError(f"empty device spec; {_USAGE}")
    if text == "cpu":
        return DeviceSpec("cpu", 1, text=text)
    if text in ("xla:cpu", "xla_cpu"):
        return DeviceSpec("xla_cpu", 1, text="xla:cpu")
    m = re.fullmatch(r"xla:cpu:(\d+)", text)
    if m:
        n = _positive(m.group(1), text)
        return DeviceSpec("xla_cpu", n, text="xla:cpu" if n == 1 else text)
    m = re.fullmatch(r"cpu:(\d+)", text)
    if m:
        return DeviceSpec("cpu", _positive(m.group(1), text), text=text)
    m = re.fullmatch(r"tpu:(\d+)", text)
    if m:
        return DeviceSpec("tpu", _positive(m.group(1), text), text=text)
    if text == "tpu":
        return DeviceSpec("tpu", 8, text="tpu:8")
    m = re.fullmatch(r"cuda:(\d+)", text)
    if m:
        return DeviceSpec("cuda", 1, gpu_ids=(int(m.group(1)),), text=text)
    m = re.fullmatch(r"(\d+)xcpu:(\d+)", text)
    if m:
        return DeviceSpec("cpu", _positive(m.group(2), text), nodes=_positive(m.group(1), text), text=text)
    m = re.fullmatch(r"(\d+)x(\d+)", text)
    if m:
        nodes, per = _positive(m.group(1), text), _positive(m.group(2), text)
        return DeviceSpec("cuda", per, nodes=nodes, text=text)
    if re.fullmatch(r"\d+(,\d+)+,?", text):
        ids = tuple(int(t) for t in text.strip(",").split(","))
        if len(set(ids)) != len(ids):
            raise DeviceSpecError(f"'{value}' lists a GPU twice; {_USAGE}")
        return DeviceSpec("cuda", len(ids), gpu_ids=ids, text=text)
    if re.fullmatch(r"\d+", text):
        n = int(text)
        if n == 0:
            return DeviceSpec("cuda", 1, gpu_ids=(0,), text=text)
        return DeviceSpec("cuda", n, text=text)
    raise DeviceSpecError(f"'{value}' is not a device spec; {_USAGE}")


def _positive(token: str, text: str) -> int:
    n = int(token)
    if n < 1:
        raise DeviceSpecError(f"'{text}' needs a count of at least 1")
    return n


def missing_gpus(spec: DeviceSpec) -> str | None:
    """Why this machine cannot give `spec` its GPUs (None: it can, or `spec` needs none). Indices
    count the visible GPUs, as torch numbers them inside CUDA_VISIBLE_DEVICES."""
    if spec.kind != "cuda":
        return None
    visible = visible_gpus()
    where = (f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r}" if "CUDA_VISIBLE_DEVICES" in os.environ
             else "nvidia-smi")
    if not visible:
        return (f"'{spec.text}' asks for GPUs, but this machine shows none ({where}); train on cpu or cpu:N here, or "
                "run the job where the GPUs are (`plan` shows any target without them)")
    highest = max(spec.gpu_ids) if spec.gpu_ids else spec.per_node - 1
    if highest >= len(visible):
        need = f"GPU {highest}" if spec.gpu_ids else f"{spec.per_node} GPUs per node"
        return f"'{spec.text}' needs {need}, but this machine shows {len(visible)} ({where})"
    return None


def visible_gpus() -> list[int | str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES where set, read as torch reads it
    (`parse_visible_devices`), else `nvidia-smi -L`'s GPUs (asked of the driver, not torch: the CLI
    stays light). Entries are indices, or GPU-/MIG- UUIDs as Slurm and Kubernetes set them."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return parse_visible_devices(env)
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # a broken or hung driver: no GPU to plan for, no traceback
        return []
    return list(range(sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))))


def parse_visible_devices(value: str) -> list[int | str]:
    """CUDA_VISIBLE_DEVICES as torch.cuda._parse_visible_devices reads it: a list of UUIDs when it
    starts with GPU- or MIG- (up to the first entry of another form); else ordinals read like
    strtoul ('1gpu' is 1), up to the first that is not one (a negative one ends the list); an entry
    given twice hides every GPU."""
    entries = value.split(",")
    prefix = next((p for p in ("GPU-", "MIG-") if value.startswith(p)), None)
    found: list[int | str] = []
    for entry in entries:
        if prefix:
            item: int | str | None = entry if entry.startswith(prefix) else None
        else:
            m = re.match(r"[+-]?\d+", entry.strip())
            item = int(m.group()) if m and int(m.group()) >= 0 else None
        if item is None:
            break
        if item in found:
            return []
        found.append(item)
    return found
