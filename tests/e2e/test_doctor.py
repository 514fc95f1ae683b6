"""`yolo-orch doctor`: exit 0 here, exit 1 with a broken torchvision (the
"operator torchvision::nms does not exist" case), stray GPU processes via nvidia-smi,
storage reachability with the password hidden, and the W&B key never printed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from orchestrator import doctor
from orchestrator.doctor import gpu_processes, runtime, services
from orchestrator.rundir import process_identity

SECRET = "wandb-key-0123456789abcdef0123456789abcdef"


def test_doctor_passes_here_and_never_prints_the_key(tmp_path):
    r = run_cli("doctor", "--json", "--runs-dir", tmp_path / "runs", cwd=tmp_path,
                env={"WANDB_API_KEY": SECRET, "YOLO_ORCH_REGISTRY": ""}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"] is True
    assert set(checks) >= {"torch+torchvision", "cuda", "gpu-processes", "xla/tpu", "cpu-bf16", "wandb", "disk",
                           "ultralytics-offline", "optuna-storage", "registry"}
    assert all(c["status"] in ("pass", "warn", "fail") for c in checks.values())
    assert checks["torch+torchvision"]["status"] == "pass"
    assert "API key configured" in checks["wandb"]["detail"]
    assert SECRET not in r.stdout + r.stderr


def _broken_torchvision(tmp_path: Path) -> Path:
    shim = tmp_path / "shim"
    (shim / "torchvision" / "ops").mkdir(parents=True)
    (shim / "torchvision" / "__init__.py").write_text("__version__ = '0.99.0+mismatched'\n")
    (shim / "torchvision" / "ops" / "__init__.py").write_text(
        "def nms(*a, **k):\n    raise RuntimeError('operator torchvision::nms does not exist')\n")
    return shim


def test_broken_torchvision_fails_with_the_fix(tmp_path, monkeypatch):
    shim = _broken_torchvision(tmp_path)
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", f"{shim}{os.pathsep}{repo}")
    check = runtime.check_torch(runtime.probe_runtime()["torch"])
    assert check.status == "fail"
    assert "operator torchvision::nms does not exist" in check.detail
    assert "torchvision" in check.fix and "pip install" in check.fix


def test_a_torch_xla_that_crashes_its_import_fails_the_xla_check_alone(tmp_path, monkeypatch):
    """torch and torch_xla are probed in one process (one import of torch): an import of torch_xla that
    kills the process (an ABI mismatch can) still leaves the torch check its answer."""
    import importlib.util

    if importlib.util.find_spec("torch_xla") is None:
        pytest.skip("torch_xla is not installed: the probe does not import it")
    shim = tmp_path / "shim" / "torch_xla"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("import os\nos.abort()\n")
    monkeypatch.setenv("PYTHONPATH", f"{shim.parent}{os.pathsep}{Path(__file__).resolve().parents[2]}")
    probed = runtime.probe_runtime()
    assert runtime.check_torch(probed["torch"]).status == "pass"
    xla = runtime.check_xla(probed["xla"])
    assert xla.status == "fail" and "the import crashed the probe (exit -6" in xla.detail, xla


@pytest.mark.slow
def test_doctor_exit_code_1_on_failure(tmp_path):
    shim = _broken_torchvision(tmp_path)
    repo = Path(__file__).resolve().parents[2]
    r = run_cli("doctor", "--runs-dir", tmp_path / "runs", cwd=tmp_path, timeout=300,
                env={"PYTHONPATH": f"{shim}{os.pathsep}{repo}"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "torchvision::nms" in r.stdout and "Traceback" not in r.stdout + r.stderr


def test_parse_nvidia_smi_csv():
    text = "pid, used_gpu_memory [MiB]\n1234, 5120 MiB\n99, [N/A]\n"
    assert gpu_processes.parse_smi_csv(text) == [{"pid": 1234, "used_mib": 5120}, {"pid": 99, "used_mib": None}]
    assert gpu_processes.parse_smi_csv("No running processes found\n") == []


def _fake_smi(tmp_path: Path, pids: list[int]) -> str:
    path = tmp_path / "nvidia-smi"
    rows = "\\n".join(f"{p}, 2048 MiB" for p in pids)
    path.write_text(f"#!/bin/sh\nprintf 'pid, used_gpu_memory [MiB]\\n{rows}\\n'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_gpu_processes_foreign_and_orphans(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    foreign = subprocess.Popen(sleep)
    orphan = subprocess.Popen(sleep, env={**os.environ, "YOLO_ORCH_SUPERVISOR_PID": str(dead.pid),
                                          "YOLO_ORCH_SUPERVISOR_START": "gone:1"})
    try:
        check = gpu_processes.check_gpu_processes(tmp_path / "runs", _fake_smi(tmp_path, [os.getpid(), foreign.pid]))
        assert check.status == "warn"
        assert f"pid {foreign.pid} (2048 MiB)" in check.detail and f"kill {foreign.pid}" in check.fix
        assert f"pid {os.getpid()} " not in check.detail  # this process is ours
        check = gpu_processes.check_gpu_processes(tmp_path / "runs", _fake_smi(tmp_path, [foreign.pid, orphan.pid]))
        assert check.status == "fail" and f"kill {orphan.pid}" in check.fix
        assert "orphaned yolo-orch" in check.detail
        check = gpu_processes.check_gpu_processes(tmp_path / "runs", _fake_smi(tmp_path, []))
        assert check.status == "pass"
    finally:
        for p in (foreign, orphan):
            p.kill()
            p.wait()


def test_storage_checks_hide_the_password(tmp_path, monkeypatch):
    for env in services.STORAGE_ENVS:
        monkeypatch.delenv(env, raising=False)
    assert services.check_storage(None).status == "pass"
    url = "postgresql://alice:hunter2secret@127.0.0.1:1/optuna"
    check = services.check_storage(url)
    assert check.status == "fail" and "hunter2secret" not in check.detail + check.fix
    assert "alice:***@127.0.0.1:1" in check.detail
    monkeypatch.setenv("YOLO_ORCH_STORAGE", f"sqlite:///{tmp_path}/s.db")
    assert services.check_storage(None).status == "pass"  # created on first use
    import sqlite3

    sqlite3.connect(tmp_path / "s.db").close()
    check = services.check_storage(None)
    assert check.status == "pass" and "reachable" in check.detail


def test_wandb_and_disk(tmp_path, monkeypatch):
    """With a key configured (online), doctor probes the W&B server: a listening one passes, a
    closed port warns that runs will log offline. Both servers are on loopback."""
    import socket

    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
        check = services.check_wandb()
    assert check.status == "pass" and "API key configured" in check.detail and "reachable" in check.detail
    assert SECRET not in json.dumps(doctor.as_json([check]))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
    closed.close()
    check = services.check_wandb()
    assert check.status == "warn" and "unreachable" in check.detail and "runs will log offline" in check.detail
    assert "wandb sync" in check.fix and check.data["reachable"] is False
    monkeypatch.setenv("WANDB_MODE", "offline")  # offline configured: no probe, nothing touches the network
    check = services.check_wandb()
    assert check.status == "pass" and "reachable" not in check.data
    assert services.check_disk(tmp_path / "runs").status == "pass"
    assert services.check_disk(tmp_path / "runs", warn_gib=1e9, fail_gib=0).status == "warn"
    assert services.check_disk(tmp_path / "runs", warn_gib=1e9, fail_gib=1e9).status == "fail"


def test_registry_check(tmp_path, monkeypatch):
    monkeypatch.delenv("YOLO_ORCH_REGISTRY", raising=False)
    assert "does not exist yet" in services.check_registry(tmp_path / "runs").detail
    from orchestrator.registry import Registry

    with Registry.open(tmp_path / "runs") as reg:
        reg.add_run("x", job="j", run_dir=tmp_path)
    check = services.check_registry(tmp_path / "runs")
    assert check.status == "pass" and "1 runs" in check.detail and "journal wal" in check.detail
    assert process_identity(os.getpid())


@pytest.mark.postgres
def test_storage_check_takes_the_url_sweep_takes(pg_url):
    """`postgresql://` (no driver named) is what `sweep` accepts and the docs show: doctor picks the
    installed driver as sweep does instead of failing on a missing psycopg."""
    assert pg_url.startswith("postgresql://")
    check = services.check_storage(pg_url)
    assert check.status == "pass" and "reachable" in check.detail, check.detail
