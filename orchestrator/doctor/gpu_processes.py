"""Processes on the GPUs: ours (a run in the registry), orphans of ours, and others'."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from orchestrator.doctor.checks import FAIL, PASS, WARN, Check


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
                    pids.update(p for p in (row.pid, row.worker_pid) if p)
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
