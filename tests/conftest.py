"""Shared fixtures. Tests drive the real CLI in subprocesses (as a user would) and
keep every dataset tiny so the suite stays fast on 2 CPU cores."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
HELPERS = Path(__file__).resolve().parent / "helpers"
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HELPERS))  # fake_kaggle, wandb_records, ...
# every training process of the tests can inject faults and, when asked, record what it applied
TEST_HOOKS = "tests.helpers.faults:attach,tests.helpers.rank_probe:attach"


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


def cli_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"  # rich wraps at the terminal width; keep lines whole for assertions
    env.update(extra or {})
    return env


def run_cli(*args, cwd: Path | None = None, env: dict | None = None, timeout: float = 600,
            input: str | None = None) -> subprocess.CompletedProcess:
    """Run `yolo-orch ARGS` in a fresh interpreter, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *map(str, args)],
        cwd=cwd, env=cli_env(env), capture_output=True, text=True, timeout=timeout, input=input,
    )


TINY_JOB = {
    "name": "tiny",
    "model": "yolo11n.yaml",
    "data": {"synth": {"images": 16, "val_images": 8, "classes": 2, "imgsz": 64, "seed": 1}},
    "epochs": 1,
    "imgsz": 64,
    "seed": 0,
    "hyp": {"preset": "scratch-default", "optimizer": "AdamW", "lr0": 0.002},
    "reference": {"devices": 1, "batch": 8},
    "target": {"devices": "cpu"},
    "wandb": {"mode": "disabled"},
    "overrides": {"workers": 0, "plots": False},
}


# What users run: the quickstart's `wandb:` section (offline with no API key configured). The tests of
# resume, requeue and the chaos campaign run with it; TINY_JOB disables W&B for tests about other things.
DEFAULT_WANDB = {"project": "yolo-orch-tests"}


def wandb_epochs(run_dir: Path) -> list[int]:
    """The epochs the run's W&B run holds, in the order its attempts wrote them (every offline attempt
    folder of the run's id, oldest first): each epoch once when a resumed run continued its W&B run."""
    from orchestrator.worker.wandb_history import logged_epochs

    return logged_epochs(run_dir / "wandb", run_dir.name.replace(".", "-"))


def no_links(run_dir: Path) -> list[Path]:
    """Symbolic links anywhere in the run directory, less the one wandb-core makes inside each attempt's
    own folder (logs/debug-core.log, to its log under ~/.cache/wandb: nothing writes through it, and no
    later attempt writes in that folder); W&B's links in wandb/ itself are switched off."""
    return [p for p in run_dir.rglob("*") if p.is_symlink()
            and not (p.name == "debug-core.log" and p.parent.name == "logs" and "-run-" in p.parent.parent.name)]


def write_job(folder: Path, job: dict | None = None, filename: str = "job.yaml", **changes) -> Path:
    data = json.loads(json.dumps(job or TINY_JOB))
    data.update(changes)
    path = folder / filename
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def write_text(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def read_events(run_dir: Path) -> list[dict]:
    """A run's events.jsonl; a line being written (not yet whole JSON) is skipped."""
    path = run_dir / "events.jsonl"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_first_epoch(runs: Path, proc: subprocess.Popen, job: str = "tiny", timeout: float = 300) -> Path:
    """The run directory of job `job` under `runs` once its first epoch event is written (`proc`, the
    submit, must still be running)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for events in runs.glob(f"{job}/*/events.jsonl"):
            if any(e.get("event") == "epoch" for e in read_events(events.parent)):
                return events.parent
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "submit exited early"
        time.sleep(0.05)
    raise AssertionError("no epoch event within the timeout")


@pytest.fixture
def tiny_job(tmp_path) -> Path:
    return write_job(tmp_path)


# ------------------------------------------------------------------ PostgreSQL (sweeps across machines)
# A database of its own per test on 127.0.0.1:5432 (user postgres, trust auth; YOLO_ORCH_PG_URL overrides the
# server URL). Where no server is reachable the test skips with the reason, except in CI (CI=true): a failure.
SERVER = os.environ.get("YOLO_ORCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL test cannot run in CI: {reason}")
    pytest.skip(f"no PostgreSQL server: {reason}")


@pytest.fixture
def pg_url():
    try:
        import psycopg2
        from sqlalchemy.engine import make_url
    except ImportError as exc:
        _unavailable(f"{exc.name} is not installed (pip install psycopg2-binary)")
    server = make_url(SERVER)
    try:
        admin = psycopg2.connect(host=server.host, port=server.port or 5432, user=server.username,
                                 password=server.password, dbname=server.database or "postgres", connect_timeout=5)
    except psycopg2.OperationalError as exc:
        _unavailable(f"{server.render_as_string(hide_password=True)}: {str(exc).strip().splitlines()[0]}")
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


class PrivateServer:
    """A PostgreSQL server of the test's own (initdb in a temporary folder, its own port, trust auth on
    loopback), so that a test may stop and start it as an outage would: `.url`, `.stop()`, `.start()`."""

    def __init__(self, folder: Path):
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
        if not bins:
            _unavailable("no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql)")
        self.bin = bins[-1].parent
        self.data, self.sock = folder / "pgdata", folder / "pgsock"
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        folder.mkdir(parents=True, exist_ok=True)
        self.sock.mkdir()
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as_postgres:
            shutil.chown(folder, "postgres")
            shutil.chown(self.sock, "postgres")
        subprocess.run([*self._as_postgres, str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                        "postgres"], check=True, capture_output=True)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.start()

    def _ctl(self, *args: str) -> None:
        subprocess.run([*self._as_postgres, str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", *args],
                       check=True, capture_output=True)

    def start(self) -> None:
        self._ctl("-o", f"-p {self.port} -k {self.sock} -c listen_addresses=127.0.0.1", "-l",
                  str(self.data.parent / "server.log"), "start")

    def stop(self, mode: str = "fast") -> None:
        self._ctl("-m", mode, "stop")


@pytest.fixture
def private_pg():
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="yolo-orch-pg-"))  # not under pytest's 0700 folder: postgres enters it
    try:
        server = PrivateServer(folder)
        yield server
        try:
            server.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------ real filesystems that fail
def _mount(args: list[str], what: str) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        reason = f"cannot mount {what} here ({(r.stderr or r.stdout).strip()}); these tests need root"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture
def small_disk(tmp_path):
    """A real filesystem that fills up: `.path`, a tmpfs of 40 MiB; `.resize(mib)` remounts it."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mnt)], "a tmpfs")

    def resize(mib: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={mib}m", str(mnt)], check=True)

    from types import SimpleNamespace

    yield SimpleNamespace(path=mnt, resize=resize)
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def read_only_view(tmp_path):
    """`view(folder)` -> the same folder through a read-only bind mount (a colleague's runs folder)."""
    mounts = []

    def view(folder: Path) -> Path:
        mnt = tmp_path / f"ro-{len(mounts)}"
        mnt.mkdir()
        _mount(["--bind", str(folder), str(mnt)], "a bind mount")
        mounts.append(mnt)
        _mount(["-o", "remount,bind,ro", str(mnt)], "a read-only bind mount")
        return mnt

    yield view
    for mnt in reversed(mounts):
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# ---------------------------------------------------------------- sweeps

# The pruned trial is guaranteed by the parameters, not by luck: the box loss gain multiplies
# val/box_loss (about 0.5 at box 0.5, about 47 at box 50), and the threshold pruner cuts any
# trial whose val/box_loss exceeds 10 at its first epoch. Trial 1 is enqueued with box 50.
SWEEP = {
    "study": "tiny-sweep",
    "base": "job.yaml",
    "space": {"hyp": {"box": {"choices": [0.5, 50.0]}, "lr0": {"low": 1.0e-3, "high": 1.0e-2, "log": True}}},
    "objective": {"metric": "val/box_loss"},
    "sampler": {"name": "tpe", "seed": 0},
    "pruner": {"name": "threshold", "upper": 10.0},
    "budget": {"n_trials": 4},
    "heartbeat": {"interval": 2},
    "enqueue": [{"hyp": {"box": 0.5, "lr0": 0.002}}, {"hyp": {"box": 50.0, "lr0": 0.002}}],
}


def write_sweep(folder: Path, name: str = "sweep.yaml", job_changes: dict | None = None, **changes) -> Path:
    write_job(folder, **{"epochs": 2, **(job_changes or {})})
    data = json.loads(json.dumps(SWEEP))
    data.update(changes)
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def space(**hyp) -> dict:
    return {"hyp": hyp}


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            zombie = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            continue
        if text in cmdline and not zombie:
            pids.append(int(proc.name))
    return pids


# ---------------------------------------------------------------- Kaggle kernels (the `kaggle` CLI is faked)

TINY_MODEL = REPO / "tests" / "assets" / "tiny-det.yaml"


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
