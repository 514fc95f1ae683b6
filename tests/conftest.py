"""Shared fixtures. Tests drive the real CLI in subprocesses (as a user would) and keep every dataset
tiny so the suite stays fast on 2 CPU cores. What they share with the benches (the CLI runner, jobs,
run readers, processes, services) is the harness, orchestrator/harness/; this file turns it into
fixtures, and a service that cannot start here into a skip (a failure in CI)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.harness import Unavailable
from orchestrator.harness.cli import REPO, cli_env, run_cli  # noqa: F401 (the tests' own imports)
from orchestrator.harness.dashboard import find_browser
from orchestrator.harness.jobs import (DEFAULT_WANDB, SWEEP, TINY_JOB, TINY_MODEL, space, write_job,  # noqa: F401
                                       write_sweep, write_text)
from orchestrator.harness.processes import processes_naming as processes_mentioning  # noqa: F401
from orchestrator.harness.runs import no_links, read_events, wait_first_epoch, wandb_epochs  # noqa: F401
from orchestrator.harness.services import (MlflowServer, PrivateServer, mount_read_only, mount_small_disk,
                                           resize_small_disk, unmount)
from orchestrator.harness.timeline import record as record_in_timeline

# every training process of the tests can inject faults and, when asked, record what it applied
TEST_HOOKS = "tests.helpers.faults:attach,tests.helpers.rank_probe:attach"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test's process, start and end, when YOLO_ORCH_TEST_TIMELINE names a file (harness/timeline.py)."""
    started = time.time()
    yield
    record_in_timeline(item.nodeid, started)


def unavailable(reason: str):
    """A real service this test needs cannot start here: a skip, but a failure in CI (CI=true)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"cannot run in CI: {reason}")
    pytest.skip(reason)


def started(start, *args):
    """`start(*args)`: a harness service (orchestrator/harness/services.py), or `unavailable` with its reason."""
    try:
        return start(*args)
    except Unavailable as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session", autouse=True)
def isolated_cache(tmp_path_factory):
    """Datasets, Ultralytics settings and fonts go to a per-session cache, never ~/.cache."""
    cache = tmp_path_factory.mktemp("yolo-orch-cache")
    old = os.environ.get("YOLO_ORCH_CACHE")
    os.environ["YOLO_ORCH_CACHE"] = str(cache)
    os.environ.pop("WANDB_API_KEY", None)
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ["YOLO_ORCH_CALLBACKS"] = TEST_HOOKS
    yield cache
    if old is None:
        os.environ.pop("YOLO_ORCH_CACHE", None)
    else:
        os.environ["YOLO_ORCH_CACHE"] = old


@pytest.fixture
def tiny_job(tmp_path) -> Path:
    return write_job(tmp_path)


# ------------------------------------------------------------------ PostgreSQL (sweeps across machines)
# A database of its own per test on 127.0.0.1:5432 (user postgres, trust auth; YOLO_ORCH_PG_URL overrides the
# server URL). Where no server is reachable the test skips with the reason, except in CI (CI=true): a failure.
SERVER = os.environ.get("YOLO_ORCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


@pytest.fixture
def pg_url():
    try:
        import psycopg2
        from sqlalchemy.engine import make_url
    except ImportError as exc:
        unavailable(f"{exc.name} is not installed (pip install psycopg2-binary)")
    server = make_url(SERVER)
    try:
        admin = psycopg2.connect(host=server.host, port=server.port or 5432, user=server.username,
                                 password=server.password, dbname=server.database or "postgres", connect_timeout=5)
    except psycopg2.OperationalError as exc:
        unavailable(f"{server.render_as_string(hide_password=True)}: {str(exc).strip().splitlines()[0]}")
    admin.autocommit = True
    name = f"yolo_orch_test_{secrets.token_hex(4)}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture
def private_pg():
    """A PostgreSQL server of the test's own, which it may stop and start as an outage would."""
    server = started(PrivateServer)
    yield server
    server.remove()


@pytest.fixture(scope="session")
def browser() -> str:
    """Chromium's path (installed when missing): the dashboard's pages as a person sees them."""
    return started(find_browser)


@pytest.fixture
def mlflow_server(tmp_path):
    """`mlflow server` on loopback with a store of the test's own, which it may stop as an outage would."""
    server = started(MlflowServer, tmp_path / "mlflow-server")
    yield server
    server.stop()


# ------------------------------------------------------------------ real filesystems that fail
@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem that fills up: `.path`, a tmpfs of 40 MiB; `.resize(mib)` remounts it."""
    mnt = started(mount_small_disk, tmp_path / "small-disk", 40)
    yield SimpleNamespace(path=mnt, resize=lambda mib: resize_small_disk(mnt, mib))
    unmount(mnt)


@pytest.fixture
def read_only_view(tmp_path):
    """`view(folder)` -> the same folder through a read-only bind mount (a colleague's runs folder)."""
    mounts = []

    def view(folder: Path) -> Path:
        mounts.append(tmp_path / f"ro-{len(mounts)}")
        return started(mount_read_only, folder, mounts[-1])

    yield view
    for mnt in reversed(mounts):
        unmount(mnt)


# ---------------------------------------------------------------- Kaggle kernels (the `kaggle` CLI is faked)

def kaggle_job(tmp_path: Path, **changes) -> Path:
    job = json.loads(json.dumps(TINY_JOB))
    # 2 images per core: the XLA loader drops short batches, so 8 cores need 16 images (the plan checks)
    job.update(model=str(TINY_MODEL), target={"devices": "tpu:8", "batch": 16})
    job["hyp"]["optimizer"] = "AdamW"
    job.update(changes)
    return write_job(tmp_path, job)


def build(tmp_path: Path, *args, env: dict | None = None, job: Path | None = None):
    """`kaggle build` into tmp_path/kernel, made anew each time (an existing folder needs --force)."""
    job = job or kaggle_job(tmp_path)
    out = tmp_path / "kernel"
    shutil.rmtree(out, ignore_errors=True)
    res = run_cli("kaggle", "build", job, "--out", out, "--owner", "alice", "--json", *args, cwd=tmp_path, env=env)
    return res, out


def bundle_of(folder: Path) -> dict:
    from orchestrator.kaggle.build import read_bundle

    return read_bundle(folder)
