"""The run registry: rows, prefixes, reconcile of vanished processes (incl. PID reuse),
several processes writing at once, and the light CLI commands (runs/show/logs)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_cli
from orchestrator.harness.runs import walk_to
from orchestrator.registry import Registry, RegistryError, registry_path
from orchestrator.rundir import process_alive, process_identity


@pytest.fixture
def reg(tmp_path, monkeypatch):
    monkeypatch.delenv("YOLO_ORCH_REGISTRY", raising=False)
    with Registry.open(tmp_path / "runs") as r:
        yield r


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_location_wal_and_env_override(tmp_path, monkeypatch):
    monkeypatch.delenv("YOLO_ORCH_REGISTRY", raising=False)
    assert registry_path(tmp_path / "runs") == (tmp_path / "runs" / "registry.db").resolve()
    with Registry.open(tmp_path / "runs") as r:
        assert r.journal_mode == "wal"
        busy = r._conn.execute("PRAGMA busy_timeout").fetchone()[0]
        assert busy >= 10_000
    monkeypatch.setenv("YOLO_ORCH_REGISTRY", str(tmp_path / "elsewhere" / "reg.db"))
    assert registry_path(tmp_path / "runs") == (tmp_path / "elsewhere" / "reg.db").resolve()
    assert registry_path(tmp_path / "x.db") == (tmp_path / "x.db").resolve()  # an explicit file wins


def test_add_update_get_list(reg, tmp_path):
    row = reg.add_run("20260101-000000-aaaa", job="tiny", run_dir=tmp_path / "r1", devices="cpu", epochs=3,
                      tags={"study": "s1", "trial": 4, "extra": "x"})
    assert row.state == "queued" and row.study == "s1" and row.trial == 4
    assert row.tags == {"study": "s1", "trial": 4, "extra": "x"}
    assert row.pid == os.getpid() and row.pid_start == process_identity(os.getpid())
    assert reg.move(row.id, "running", note="started")
    assert reg.move(row.id, "finished", metrics={"metrics/mAP50-95(B)": 0.5}, epochs_done=3, note="done")
    got = reg.get(row.id)
    assert got.state == "finished" and got.metrics == {"metrics/mAP50-95(B)": 0.5}
    assert [n.text for n in got.notes] == ["started", "done"]
    reg.add_run("20260101-000001-bbbb", job="other", run_dir=tmp_path / "r2")
    assert [r.id for r in reg.list()] == ["20260101-000001-bbbb", "20260101-000000-aaaa"]
    assert [r.id for r in reg.list(state="finished")] == ["20260101-000000-aaaa"]
    assert [r.id for r in reg.list(study="s1")] == ["20260101-000000-aaaa"]
    with pytest.raises(ValueError):
        reg.move(row.id, "exploded")
    with pytest.raises(ValueError):
        reg.update(row.id, colour="red")
    with pytest.raises(RegistryError):
        reg.move("nope", "failed")


def test_resolve_prefix(reg, tmp_path):
    for rid in ("20260101-000000-aaaa", "20260101-000000-abcd", "20260102-000000-ffff"):
        reg.add_run(rid, job="tiny", run_dir=tmp_path / rid)
    assert reg.resolve("20260102").id == "20260102-000000-ffff"
    assert reg.resolve("tiny/20260102").id == "20260102-000000-ffff"
    assert reg.resolve("20260101-000000-abcd").id == "20260101-000000-abcd"
    with pytest.raises(RegistryError, match="several runs"):
        reg.resolve("20260101")
    with pytest.raises(RegistryError, match="no run matches"):
        reg.resolve("1999")
    with pytest.raises(RegistryError, match="no run matches"):
        reg.resolve("2026%")  # LIKE wildcards are literal
    with pytest.raises(RegistryError, match="no run matches"):
        reg.resolve("other/20260102")


def test_reconcile_vanished_process(reg, tmp_path):
    (tmp_path / "r" / "weights").mkdir(parents=True)
    (tmp_path / "r" / "results.csv").write_text("epoch,x\n1,0\n2,0\n")
    (tmp_path / "r" / "weights" / "last.pt").write_bytes(b"epoch 2's checkpoint, written after its row")
    reg.add_run("a", job="tiny", run_dir=tmp_path / "r", pid=_dead_pid())
    reg.move("a", "running", pid=_dead_pid(), worker_pid=_dead_pid())
    row = reg.get("a")  # a read shows the outcome ...
    assert row.state == "killed" and row.epochs_done == 2
    assert "vanished" in row.notes[-1].text and "resume" in row.notes[-1].text
    assert _stored_state(reg, "a") == "running"  # ... and writes nothing
    assert [r.id for r in reg.list(state="killed")] == ["a"] and reg.list(state="running") == []
    assert reg.resolve("a").state == "killed"
    assert reg.reconcile() == ["a"]  # the explicit step of the commands that change state
    assert _stored_state(reg, "a") == "killed"
    row = reg.get("a")
    assert row.ended_at is not None and row.epochs_done == 2 and len(row.notes) == 1


def _stored_state(reg: Registry, run_id: str) -> str:
    import sqlite3

    con = sqlite3.connect(f"file:{reg.path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    finally:
        con.close()


def test_runs_show_logs_work_on_a_registry_that_cannot_be_written(tmp_path):
    """An immutable registry file (chattr +i: even root cannot write it) with a vanished run: the reads
    show it killed and change nothing; resume, which must write, says so in one line."""
    runs = tmp_path / "runs"
    with Registry.open(runs) as reg:
        reg.add_run("20260101-000000-aaaa", job="tiny", run_dir=runs / "tiny" / "20260101-000000-aaaa")
        reg.move("20260101-000000-aaaa", "running", pid=_dead_pid())
    db = runs / "registry.db"
    if subprocess.run(["chattr", "+i", str(db)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not supported here (needs root and a filesystem with inode flags)")
    try:
        before = db.read_bytes()
        out = run_cli("runs", "--json", "--runs-dir", runs, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert [(r["id"], r["state"]) for r in json.loads(out.stdout)] == [("20260101-000000-aaaa", "killed")]
        show = run_cli("show", "2026", "--runs-dir", runs, "--json", cwd=tmp_path)
        assert show.returncode == 0 and json.loads(show.stdout)["run"]["state"] == "killed", show.stderr
        logs = run_cli("logs", "2026", "--runs-dir", runs, cwd=tmp_path)
        assert logs.returncode == 2 and "has no log yet" in logs.stderr  # read, not refused
        resume = run_cli("resume", "2026", "--runs-dir", runs, cwd=tmp_path)
        assert resume.returncode == 1 and len(resume.stderr.strip().splitlines()) == 1, resume.stderr
        assert "readonly" in resume.stderr and "Traceback" not in resume.stderr
        assert db.read_bytes() == before
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)


def test_reconcile_pid_reuse(reg, tmp_path):
    """A live PID that now belongs to another process (start time differs) is not our run."""
    me = os.getpid()
    assert process_alive(me, process_identity(me))
    assert not process_alive(me, "other-boot:12345")
    reg.add_run("reused", job="tiny", run_dir=tmp_path)
    reg.move("reused", "running", pid=me, pid_start="other-boot:12345")
    assert reg.get("reused").state == "killed"
    assert reg.reconcile() == ["reused"]


def test_reconcile_keeps_live_and_foreign_rows(reg, tmp_path):
    reg.add_run("live", job="tiny", run_dir=tmp_path)  # owned by this process: alive
    reg.move("live", "running", pid=os.getpid())
    reg.add_run("foreign", job="tiny", run_dir=tmp_path, pid=_dead_pid())
    reg.move("foreign", "running", host="another-machine")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reg.add_run("worker-alive", job="tiny", run_dir=tmp_path, pid=_dead_pid())
        reg.move("worker-alive", "running", worker_pid=sleeper.pid)
        states = {r.id: r.state for r in reg.list()}
        assert states == {"live": "running", "foreign": "running", "worker-alive": "running"}
    finally:
        sleeper.kill()
        sleeper.wait()
    assert reg.get("worker-alive").state == "killed"


def test_reconcile_finished_summary(reg, tmp_path):
    """The orchestrator died after the worker wrote a finished summary: the run finished."""
    (tmp_path / "summary.json").write_text(json.dumps({"state": "finished", "metrics": {"m": 1.0},
                                                       "epochs_completed": 3}))
    reg.add_run("done", job="tiny", run_dir=tmp_path, pid=_dead_pid())
    reg.move("done", "running", pid=_dead_pid())
    row = reg.get("done")
    assert row.state == "finished" and row.metrics == {"m": 1.0} and row.epochs_done == 3


def test_a_move_is_compare_and_set(reg, tmp_path):
    reg.add_run("t", job="tiny", run_dir=tmp_path)
    assert reg.move("t", "killed")
    assert reg.move("t", "queued", expect="killed", note="claimed")
    assert not reg.move("t", "queued", expect="killed")  # a second claimant loses
    assert reg.get("t").notes[-1].text == "claimed" and reg.get("t").state == "queued"


def _writer(db: str, n: int, worker: int) -> None:
    with Registry.open(db) as r:
        for i in range(n):
            rid = f"w{worker}-{i}"
            r.add_run(rid, job="j", run_dir="/tmp/x", pid=os.getpid())
            r.move(rid, "running", note="go")
            r.move(rid, "finished", metrics={"i": i})
            r.list(limit=5)


def test_several_processes_at_once(tmp_path):
    db = str(tmp_path / "registry.db")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(db, 40, w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with Registry.open(db) as r:
        rows = r.list()
    assert len(rows) == 160 and all(row.state == "finished" for row in rows)


# ---------------------------------------------------------------- CLI (light: no torch)

def _seed_runs(runs: Path) -> None:
    with Registry.open(runs) as r:
        d = runs / "tiny" / "20260101-000000-aaaa"
        d.mkdir(parents=True)
        (d / "train.log").write_text("line one\nline two\n")
        (d / "summary.json").write_text(json.dumps({"state": "finished", "metrics": {"metrics/mAP50-95(B)": 0.25}}))
        r.add_run(d.name, job="tiny", run_dir=d, devices="cpu", epochs=2)
        walk_to(r, d.name, "finished", metrics={"metrics/mAP50-95(B)": 0.25}, epochs_done=2, started_at=time.time())
        r.add_run("20260102-000000-bbbb", job="sweepjob", run_dir=runs / "sweepjob" / "x", devices="cpu",
                  tags={"study": "s", "trial": 7}, pid=_dead_pid())


def test_cli_runs_show_logs(tmp_path):
    runs = tmp_path / "runs"
    _seed_runs(runs)
    r = run_cli("runs", "--runs-dir", runs, "--json", env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {row["id"]: row["state"] for row in rows} == {"20260101-000000-aaaa": "finished",
                                                         "20260102-000000-bbbb": "killed"}
    r = run_cli("runs", "--runs-dir", runs, "--state", "killed", env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 0 and "20260102-000000-bbbb" in r.stdout and "aaaa" not in r.stdout
    r = run_cli("runs", "--runs-dir", runs, "--state", "bogus", env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 2 and "--state" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("show", "20260101", "--runs-dir", runs, "--json", env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["run"]["id"] == "20260101-000000-aaaa" and info["summary"]["state"] == "finished"
    r = run_cli("show", "2026", "--runs-dir", runs, env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 2 and "several runs" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("show", "nope", "--runs-dir", runs, env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 2 and "RUN: no run matches 'nope'" in r.stderr
    r = run_cli("logs", "tiny/2026", "--runs-dir", runs, env={"YOLO_ORCH_REGISTRY": ""})
    assert r.returncode == 0 and r.stdout == "line one\nline two\n"
    r = run_cli("logs", "20260101", "--follow", "--runs-dir", runs, env={"YOLO_ORCH_REGISTRY": ""}, timeout=30)
    assert r.returncode == 0 and "line two" in r.stdout  # a finished run: --follow returns


def test_registry_cli_paths_import_no_torch(tmp_path):
    runs = tmp_path / "runs"
    _seed_runs(runs)
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from orchestrator.cli.app import app\n"
        "r = CliRunner()\n"
        f"for args in (['runs', '--runs-dir', {str(runs)!r}], ['show', '20260101', '--runs-dir', {str(runs)!r}],"
        f" ['logs', '20260101', '--runs-dir', {str(runs)!r}]):\n"
        "    res = r.invoke(app, args)\n"
        "    assert res.exit_code == 0, (args, res.output)\n"
        "heavy = [m for m in ('torch', 'ultralytics', 'torchvision') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    env.pop("YOLO_ORCH_REGISTRY", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_logs_follow_until_the_run_ends(tmp_path):
    """`logs --follow` prints new lines as they arrive and returns once the run's process is gone."""
    runs = tmp_path / "runs"
    d = runs / "tiny" / "20260101-000000-cccc"
    d.mkdir(parents=True)
    log = d / "train.log"
    log.write_text("first\n")
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with Registry.open(runs) as r:
            r.add_run(d.name, job="tiny", run_dir=d, pid=_dead_pid())
            r.move(d.name, "running", worker_pid=worker.pid)
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]), YOLO_ORCH_REGISTRY="")
        follow = subprocess.Popen([sys.executable, "-m", "orchestrator", "logs", d.name, "--follow", "--runs-dir",
                                   str(runs)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        time.sleep(3)
        with log.open("a") as f:
            f.write("second\n")
        time.sleep(2)
        assert follow.poll() is None  # still following a live run
        worker.kill()
        worker.wait()
        out, err = follow.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert follow.returncode == 0, err
    assert out == "first\nsecond\n"
    with Registry.open(runs) as r:
        assert r.get(d.name).state == "killed"
