"""W&B, disk space, Ultralytics offline, the sweep storage and the run registry."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

from orchestrator.doctor.checks import FAIL, GIB, PASS, WARN, Check, last_error, run_python

STORAGE_ENVS = ("YOLO_ORCH_STORAGE", "YOLO_ORCH_SWEEP_STORAGE")


def check_wandb() -> Check:
    from orchestrator.jobspec.job import Wandb
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
    from orchestrator.rundir.tracking import sqlite_file
    from orchestrator.urls import redact_text, redact_url

    shown = redact_url(url)
    path = sqlite_file(url)
    if path is not None:
        path = path.expanduser()
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
    code, stdout, stderr = run_python(_STORAGE_PROBE, timeout=30, env={"YOLO_ORCH_DOCTOR_URL": url})
    if code == 0 and "ok" in stdout:
        return Check("optuna-storage", PASS, f"{shown}: reachable", "", {})
    reason = redact_text(last_error(stderr), url)
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
    active = sum(r.state == "running" for r in rows)
    detail = f"{path}: {len(rows)} runs, {active} running, journal {mode}"
    if mode != "wal":
        return Check("registry", WARN, detail, "WAL is unavailable on this filesystem (network share?): keep the "
                     "runs folder on a local disk when several orchestrators run at once")
    return Check("registry", PASS, detail, "")
