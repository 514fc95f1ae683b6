"""torch, torchvision, CUDA and XLA: probed in one subprocess (one import of torch), so a broken install cannot crash
the doctor."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

from orchestrator.doctor.checks import FAIL, GIB, PASS, TIMED_OUT, WARN, Check, last_error, run_python


_RUNTIME_PROBE = r"""
import json, sys
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda_build"] = torch.version.cuda
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
    print(json.dumps({"torch": out})); sys.exit(0)
try:
    import torchvision
    out["torchvision"] = torchvision.__version__
    from torchvision.ops import nms
    keep = nms(torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.], [20., 20., 30., 30.]]),
               torch.tensor([0.9, 0.8, 0.7]), 0.5)
    out["nms"] = keep.tolist()
except Exception as e:
    out["torchvision_error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
try:
    out["cuda_available"] = torch.cuda.is_available()
    devs = []
    for i in range(torch.cuda.device_count() if out["cuda_available"] else 0):
        free, total = torch.cuda.mem_get_info(i)
        devs.append({"index": i, "name": torch.cuda.get_device_name(i), "free": free, "total": total})
    out["cuda_devices"] = devs
except Exception as e:
    out["cuda_error"] = f"{type(e).__name__}: {e}"
print(json.dumps({"torch": out}), flush=True)  # kept if torch_xla's import below crashes the process
if sys.argv[1:] == ["xla"]:
    xla = {}
    try:
        import torch_xla
        xla["torch"] = torch.__version__
        xla["torch_xla"] = getattr(torch_xla, "__version__", "?")
    except Exception as e:
        xla["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    print(json.dumps({"xla": xla}))
"""
PROBE_TIMEOUT_S = 180  # a first import of torch_xla from a cold disk can take minutes


def probe_runtime() -> dict:
    """torch, torchvision and CUDA, and torch_xla when it is installed, in one subprocess (one import of
    torch, the probe's cost): {"torch": {...}, "xla": {...} or None}."""
    xla = importlib.util.find_spec("torch_xla") is not None
    code, stdout, stderr = run_python(_RUNTIME_PROBE, args=("xla",) if xla else (), timeout=PROBE_TIMEOUT_S)
    parts = probe_parts(stdout)
    torch_info = parts.get("torch") or {"probe_error": f"exit {code}: {last_error(stderr)}"}
    if not xla:
        return {"torch": torch_info, "xla": None}
    xla_info = parts.get("xla") or {"error": why_no_xla_part(code, stderr, torch_info)}
    return {"torch": torch_info, "xla": xla_info}


def probe_parts(stdout: str) -> dict:
    """The probe's parts by name, from its lines that are JSON objects (a package may print other lines)."""
    parts = {}
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            parts.update(record)
    return parts


def why_no_xla_part(code: int, stderr: str, torch_info: dict) -> str:
    if "torch_error" in torch_info:
        return f"torch does not import: {torch_info['torch_error']}"
    if code == TIMED_OUT:
        return f"the import did not finish in {PROBE_TIMEOUT_S} s"
    if code:
        return f"the import crashed the probe (exit {code}: {last_error(stderr)})"
    return "the probe printed nothing"


def check_torch(info: dict) -> Check:
    if "probe_error" in info:
        return Check("torch+torchvision", FAIL, f"the probe crashed: {info['probe_error']}",
                     "reinstall torch and torchvision from the same index: pip install --force-reinstall torch torchvision")
    if "torch_error" in info:
        return Check("torch+torchvision", FAIL, f"import torch failed: {info['torch_error']}",
                     "pip install torch (scripts/setup.sh pins a tested build)")
    versions = f"torch {info['torch']}, torchvision {info.get('torchvision', '?')}"
    if "torchvision_error" in info:
        return Check("torch+torchvision", FAIL,
                     f"{versions}: torchvision's C++ ops do not load ({info['torchvision_error']}); Ultralytics "
                     "cannot validate (NMS) with this pair",
                     f"install the torchvision build released with torch {info['torch']}, from the same index as "
                     "torch: pip install --force-reinstall torch==" + info["torch"].split("+")[0] + " torchvision "
                     "(a CPU-only torch wheel with a CUDA torchvision, or the reverse, gives "
                     "'operator torchvision::nms does not exist')",
                     {k: info.get(k) for k in ("torch", "torchvision")})
    return Check("torch+torchvision", PASS, f"{versions}: torchvision.ops.nms runs", "",
                 {k: info.get(k) for k in ("torch", "torchvision")})


def check_cuda(info: dict) -> Check:
    if "torch_error" in info or "probe_error" in info:
        return Check("cuda", WARN, "unknown (torch does not import)", "fix torch first")
    if "cuda_error" in info:
        return Check("cuda", FAIL, f"CUDA query failed: {info['cuda_error']}",
                     "check the NVIDIA driver (nvidia-smi) matches the CUDA build of torch "
                     f"({info.get('torch_cuda_build')})")
    devs = info.get("cuda_devices") or []
    if not devs:
        build = info.get("torch_cuda_build")
        why = "this torch is a CPU-only build" if not build else f"torch (CUDA {build}) sees no GPU"
        return Check("cuda", WARN, f"no CUDA devices: {why}; jobs run on cpu only",
                     "on a GPU machine: install the CUDA build of torch and check nvidia-smi" if not build
                     else "check nvidia-smi and CUDA_VISIBLE_DEVICES", {"devices": []})
    parts, status, fix = [], PASS, ""
    for d in devs:
        free_frac = d["free"] / d["total"] if d["total"] else 0
        parts.append(f"{d['index']}: {d['name']} {d['free'] / GIB:.1f}/{d['total'] / GIB:.1f} GiB free")
        if free_frac < 0.5:
            status = WARN
            fix = "another process holds GPU memory: see the gpu-processes check"
    return Check("cuda", status, "; ".join(parts), fix, {"devices": devs})


def tpu_present() -> list[str]:
    hints = [str(p) for p in Path("/dev").glob("accel*")]
    hints += [f"{k}={os.environ[k]}" for k in ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "COLAB_TPU_ADDR")
              if os.environ.get(k)]
    if os.environ.get("PJRT_DEVICE", "").upper() == "TPU":
        hints.append("PJRT_DEVICE=TPU")
    return hints


def check_xla(info: dict | None) -> Check:
    """`info`: probe_runtime()'s "xla" part (None: torch_xla is not installed)."""
    tpu = tpu_present()
    if info is None:
        if tpu:
            return Check("xla/tpu", FAIL, f"a TPU is present ({', '.join(tpu)}) but torch-xla is not installed",
                         "pip install 'torch-xla==<your torch version>' (torch-xla X.Y needs torch X.Y)", {"tpu": tpu})
        return Check("xla/tpu", PASS, "torch-xla not installed, no TPU (only needed for tpu:N and xla:cpu)", "",
                     {"tpu": []})
    if "error" in info:
        return Check("xla/tpu", FAIL, f"torch-xla does not import: {info['error']}",
                     "install the torch-xla release that matches torch exactly (torch-xla 2.9.0 needs torch 2.9.0 "
                     "and torchvision 0.24.0)", info)
    t, x = info["torch"].split("+")[0], info["torch_xla"].split("+")[0]
    if t.split(".")[:2] != x.split(".")[:2]:
        return Check("xla/tpu", FAIL, f"torch {t} with torch-xla {x}: versions must match",
                     f"pip install torch-xla=={t} (or torch=={x})", info)
    where = f"TPU present ({', '.join(tpu)})" if tpu else "no TPU here (xla:cpu works with PJRT_DEVICE=CPU)"
    return Check("xla/tpu", PASS, f"torch-xla {x} imports; {where}", "", {**info, "tpu": tpu})
