"""`yolo-orch doctor`: environment checks, each pass / warn / fail with the fix.

Heavy imports (torch, torchvision, torch_xla, sqlalchemy) happen only in short-lived
subprocesses: a broken install cannot crash the doctor, and the CLI stays light.
Secrets are never printed: the W&B key is reported as configured or not, storage URLs
with the password hidden."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

PASS, WARN, FAIL = "pass", "warn", "fail"
STORAGE_ENVS = ("YOLO_ORCH_STORAGE", "YOLO_ORCH_SWEEP_STORAGE")
GIB = 1 << 30


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def _py(code: str, timeout: float = 120, env: dict | None = None) -> tuple[int, str, str]:
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:.0f} s"


def _last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception)\b", ln):
            return ln[:400]
    return (lines[-1] if lines else "no output")[:400]


# ------------------------------------------------------------------ torch / torchvision / CUDA

_TORCH_PROBE = r"""
import json, sys
out = {}
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda_build"] = torch.version.cuda
except Exception as e:
    out["torch_error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(out)); sys.exit(0)
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
print(json.dumps(out))
"""


def probe_torch() -> dict:
    code, stdout, stderr = _py(_TORCH_PROBE)
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"probe_error": f"exit {code}: {_last_error(stderr)}"}


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


# ------------------------------------------------------------------ processes on GPUs

def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:160]
    except OSError:
        return "?"


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, _, v = item.partition(b"=")
        if k.startswith(b"YOLO_ORCH_"):
            out[k.decode()] = v.decode(errors="replace")
    return out


def gpu_processes(nvidia_smi: str | None = None) -> tuple[list[dict], str]:
    """[{pid, used_mib}], and how they were found."""
    smi = nvidia_smi or shutil.which("nvidia-smi")
    if smi:
        try:
            p = subprocess.run([smi, "--query-compute-apps=pid,used_memory", "--format=csv"], capture_output=True,
                               text=True, timeout=20)
            if p.returncode == 0:
                return parse_smi_csv(p.stdout), "nvidia-smi"
        except (OSError, subprocess.SubprocessError):
            pass
    procs = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            links = [os.readlink(fd) for fd in fd_dir.iterdir()]
        except OSError:
            continue
        if any(re.fullmatch(r"/dev/nvidia\d+", link) for link in links):
            procs.append({"pid": int(fd_dir.parent.name), "used_mib": None})
    return procs, "/proc/*/fd -> /dev/nvidia*"


def parse_smi_csv(text: str) -> list[dict]:
    out = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if not parts or not parts[0].isdigit():
            continue  # header ("pid, used_gpu_memory [MiB]") or "No running processes found"
        mem = re.match(r"(\d+)", parts[1]) if len(parts) > 1 else None
        out.append({"pid": int(parts[0]), "used_mib": int(mem.group(1)) if mem else None})
    return out


def our_pids(runs_dir: Path) -> set[int]:
    """PIDs of running runs in the registry (supervisors and workers)."""
    pids: set[int] = set()
    try:
        from orchestrator.registry import Registry, registry_path

        if registry_path(runs_dir).exists():
            with Registry.open(runs_dir) as reg:
                for row in reg.list(state="running"):
                    pids.update(p for p in (row.get("pid"), row.get("worker_pid")) if p)
    except Exception:  # noqa: BLE001 - the registry has its own check
        pass
    return pids


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def check_gpu_processes(runs_dir: Path, nvidia_smi: str | None = None) -> Check:
    procs, how = gpu_processes(nvidia_smi)
    ours = our_pids(runs_dir)
    our_groups = {g for g in (_pgid(p) for p in ours) if g}  # a run's ranks and dataloader workers
    ours.add(os.getpid())
    foreign, orphans = [], []
    from orchestrator.rundir import ENV_SUPERVISOR_PID, ENV_SUPERVISOR_START, process_alive

    for p in procs:
        pid = p["pid"]
        if pid in ours or (_pgid(pid) in our_groups and _pgid(pid) is not None):
            continue
        env = _environ(pid)
        entry = {**p, "cmd": _cmdline(pid)}
        sup = env.get(ENV_SUPERVISOR_PID)
        if sup and not process_alive(int(sup), env.get(ENV_SUPERVISOR_START) or None):
            orphans.append(entry)
        else:
            foreign.append(entry)
    data = {"method": how, "processes": procs, "foreign": foreign, "orphans": orphans}
    if not procs:
        return Check("gpu-processes", PASS, f"no process holds a GPU ({how})", "", data)

    def fmt(e):
        return f"pid {e['pid']}" + (f" ({e['used_mib']} MiB)" if e.get("used_mib") else "") + f": {e['cmd']}"

    if orphans:
        return Check("gpu-processes", FAIL,
                     "orphaned yolo-orch training processes hold GPUs (their orchestrator is gone): "
                     + "; ".join(fmt(e) for e in orphans),
                     "end them: " + "; ".join(f"kill {e['pid']}" for e in orphans)
                     + " (kill -9 PID if they ignore it)", data)
    if foreign:
        return Check("gpu-processes", WARN,
                     "processes that are not this orchestrator's runs hold GPUs: " + "; ".join(fmt(e) for e in foreign),
                     "if they are leftovers (zombie trainings, notebooks): "
                     + "; ".join(f"kill {e['pid']}" for e in foreign) + " (kill -9 PID if they ignore it)", data)
    return Check("gpu-processes", PASS, f"only this orchestrator's runs hold GPUs ({len(procs)} processes)", "", data)


# ------------------------------------------------------------------ XLA / TPU

_XLA_PROBE = r"""
import json
out = {}
try:
    import torch, torch_xla
    out["torch"] = torch.__version__
    out["torch_xla"] = getattr(torch_xla, "__version__", "?")
except Exception as e:
    out["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
print(json.dumps(out))
"""


def tpu_present() -> list[str]:
    hints = [str(p) for p in Path("/dev").glob("accel*")]
    hints += [f"{k}={os.environ[k]}" for k in ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "COLAB_TPU_ADDR")
              if os.environ.get(k)]
    if os.environ.get("PJRT_DEVICE", "").upper() == "TPU":
        hints.append("PJRT_DEVICE=TPU")
    return hints


def check_xla() -> Check:
    tpu = tpu_present()
    if importlib.util.find_spec("torch_xla") is None:
        if tpu:
            return Check("xla/tpu", FAIL, f"a TPU is present ({', '.join(tpu)}) but torch-xla is not installed",
                         "pip install 'torch-xla==<your torch version>' (torch-xla X.Y needs torch X.Y)", {"tpu": tpu})
        return Check("xla/tpu", PASS, "torch-xla not installed, no TPU (only needed for tpu:N and xla:cpu)", "",
                     {"tpu": []})
    code, stdout, stderr = _py(_XLA_PROBE, timeout=180)
    try:
        info = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        info = {"error": _last_error(stderr)}
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


# ------------------------------------------------------------------ W&B, disk, Ultralytics offline, storage

def check_wandb() -> Check:
    from orchestrator.spec.job import Wandb
    from orchestrator.wandb_mode import api_key_configured, resolve_mode

    installed = importlib.util.find_spec("wandb") is not None
    mode, why = resolve_mode(Wandb())
    key = api_key_configured()
    detail = (f"wandb {'installed' if installed else 'not installed'}; default mode {mode} ({why}); API key "
              f"{'configured' if key else 'not configured'}")
    data = {"installed": installed, "mode": mode, "key_configured": key}
    if os.environ.get("WANDB_MODE") == "online" and not key:
        return Check("wandb", WARN, detail + "; WANDB_MODE=online without a key will fail to log in",
                     "wandb login (or set WANDB_API_KEY), or unset WANDB_MODE to log offline", data)
    if not installed:
        return Check("wandb", PASS, detail + " (runs are not logged to W&B)", "pip install wandb to log runs", data)
    if mode == "online":  # the only check that touches the network, and only because online was configured
        from orchestrator.worker.wandb_reach import server_address, unreachable_reason

        unreachable = unreachable_reason()
        data["reachable"] = unreachable is None
        if unreachable:
            return Check("wandb", WARN, f"{detail}; {unreachable}: runs will log offline",
                         "upload later with `wandb sync RUN_DIR/wandb/offline-run-*`, or set WANDB_MODE=offline "
                         "to skip the check", data)
        host, port = server_address()
        detail += f"; {host}:{port} reachable"
    fix = "" if key else "optional: wandb login (runs are logged offline; `wandb sync` uploads them later)"
    return Check("wandb", PASS, detail, fix, data)


def check_disk(runs_dir: Path, warn_gib: float = 10.0, fail_gib: float = 1.0) -> Check:
    probe = runs_dir.expanduser().resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    free = usage.free / GIB
    detail = f"{free:.1f} GiB free of {usage.total / GIB:.1f} GiB at {probe} (runs folder {runs_dir})"
    data = {"free_bytes": usage.free, "path": str(probe)}
    if free < fail_gib:
        return Check("disk", FAIL, detail, "free space: delete old runs (yolo-orch runs) or set runs_dir elsewhere",
                     data)
    if free < warn_gib:
        return Check("disk", WARN, detail, "checkpoints of large models need several GiB; free some space", data)
    return Check("disk", PASS, detail, "", data)


def check_ultralytics_offline() -> Check:
    if importlib.util.find_spec("ultralytics") is None:
        return Check("ultralytics-offline", FAIL, "ultralytics is not installed", "pip install ultralytics (scripts/setup.sh)")
    from orchestrator.worker.offline import FONTS, INTEGRATIONS, config_dir

    base = Path(os.environ.get("YOLO_CONFIG_DIR") or config_dir()) / "Ultralytics"
    missing = [f for f in FONTS if not (base / f).is_file()]
    settings_file = base / "settings.json"
    on = []
    if settings_file.is_file():
        try:
            settings = json.loads(settings_file.read_text())
            on = [k for k in (*INTEGRATIONS, "sync") if settings.get(k)]
        except ValueError:
            on = ["(unreadable settings.json)"]
    data = {"config_dir": str(base), "missing_fonts": missing, "integrations_on": on}
    problems, fixes = [], []
    if missing:
        problems.append(f"fonts missing in {base}: {', '.join(missing)} (Ultralytics would try to download them)")
        fixes.append("python -c 'from orchestrator.worker.offline import prepare_env; prepare_env()' "
                     "(copies a bundled font; every run also does this)")
    if on:
        problems.append(f"integrations on in {settings_file}: {', '.join(on)}")
        fixes.append("they are switched off in every run's worker; to clear them now: yolo settings "
                     + " ".join(f"{k}=False" for k in on if not k.startswith("(")))
    if problems:
        return Check("ultralytics-offline", WARN, "; ".join(problems), "; ".join(fixes), data)
    return Check("ultralytics-offline", PASS, f"fonts present, integrations off ({base})", "", data)


_STORAGE_PROBE = r"""
import os, sys
url = os.environ["YOLO_ORCH_DOCTOR_URL"]
from orchestrator.sweep.study import check_url
url = check_url(url)  # the driver `sweep` would pick for a plain postgresql:// URL
from sqlalchemy import create_engine, text
kw = {"connect_args": {"timeout": 10}} if url.startswith("sqlite") else {"connect_args": {"connect_timeout": 10}}
try:
    eng = create_engine(url, **kw)
except TypeError:
    eng = create_engine(url)
with eng.connect() as c:
    c.execute(text("SELECT 1"))
print("ok")
"""


def check_storage(url: str | None) -> Check:
    if not url:
        for env in STORAGE_ENVS:
            if os.environ.get(env):
                url = os.environ[env]
                break
    if not url:
        return Check("optuna-storage", PASS, "not configured (sweeps use a SQLite file under the runs folder)", "")
    from orchestrator.urls import redact_text, redact_url

    shown = redact_url(url)
    if url.startswith("sqlite:///"):
        path = Path(url.split("sqlite:///", 1)[1]).expanduser()
        parent = path.parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not os.access(parent, os.W_OK):
            return Check("optuna-storage", FAIL, f"{shown}: {parent} is not writable", "choose a writable path", {})
        if not path.exists():
            return Check("optuna-storage", PASS, f"{shown}: will be created on first use", "", {})
    if importlib.util.find_spec("sqlalchemy") is None:
        return Check("optuna-storage", FAIL, f"{shown}: sqlalchemy is not installed",
                     "pip install 'yolo-orch[sweep]'", {})
    code, stdout, stderr = _py(_STORAGE_PROBE, timeout=30, env={"YOLO_ORCH_DOCTOR_URL": url})
    if code == 0 and "ok" in stdout:
        return Check("optuna-storage", PASS, f"{shown}: reachable", "", {})
    reason = redact_text(_last_error(stderr), url)
    return Check("optuna-storage", FAIL, f"{shown}: not reachable ({reason})",
                 "check host, port, database and credentials (PostgreSQL needs psycopg2: pip install "
                 "'yolo-orch[postgres]')", {})


def check_registry(runs_dir: Path) -> Check:
    from orchestrator.registry import Registry, registry_path

    path = registry_path(runs_dir)
    if not path.exists():
        return Check("registry", PASS, f"{path} does not exist yet (created by the first run)", "")
    try:
        with Registry.open(runs_dir) as reg:
            ok = reg._conn.execute("PRAGMA quick_check").fetchone()[0]
            rows = reg.list()
            mode = reg.journal_mode
    except Exception as exc:  # noqa: BLE001
        return Check("registry", FAIL, f"{path}: {type(exc).__name__}: {exc}",
                     f"move {path} aside (runs stay on disk; a new registry starts empty)")
    if ok != "ok":
        return Check("registry", FAIL, f"{path}: integrity check says {ok}", f"move {path} aside")
    active = sum(r["state"] == "running" for r in rows)
    detail = f"{path}: {len(rows)} runs, {active} running, journal {mode}"
    if mode != "wal":
        return Check("registry", WARN, detail, "WAL is unavailable on this filesystem (network share?): keep the "
                     "runs folder on a local disk when several orchestrators run at once")
    return Check("registry", PASS, detail, "")


def run_checks(runs_dir: Path, storage: str | None = None, nvidia_smi: str | None = None) -> list[Check]:
    info = probe_torch()
    steps: list[Callable[[], Check]] = [
        lambda: check_torch(info),
        lambda: check_cuda(info),
        lambda: check_gpu_processes(runs_dir, nvidia_smi),
        check_xla,
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
