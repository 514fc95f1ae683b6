"""What the chaos campaign's parts share (bench/chaos.py, chaos_sweep.py, chaos_slurm.py): commands run
as a user runs them, the processes they start, a run's state as the registry and its events say it,
and the campaign's one wait."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.rundir import EventTail

REPO = Path(__file__).resolve().parents[1]
SECRET = "chaos-secret-3f9a1c"  # in every process's environment: it must appear in no file or output
EPOCHS = 5  # of every run the campaign trains (its sweeps' trials: chaos_sweep.SWEEP_EPOCHS)
MAX_RESUMES = 3


@dataclass
class Episode:
    number: int
    kind: str
    devices: str
    at_epoch: int  # the fault strikes after this epoch's event (0: after train_start)
    delay_s: float
    run_id: str | None = None
    run_dir: str | None = None
    resumes: int = 0
    state: str | None = None
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    struck: bool = False  # the fault landed on a running run (a run that ended first is drawn again)

    @property
    def survived(self) -> bool:
        return self.state == "finished" and (self.kind != "stop-run" or self.resumes == 0)


def wait_for(predicate, timeout: float = 300, poll: float = 0.2) -> bool:
    """Poll `predicate` until it holds (True) or `timeout` seconds pass (False); the campaign's one wait."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(poll)
    return False


# ---------------------------------------------------------------- processes


def cli(*args: str, work: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=work, env=env_for(work),
                          capture_output=True, text=True, timeout=timeout)


STARTED: list[subprocess.Popen] = []  # every command start_cli started (stop_started ends those left)


def start_cli(*args: str, work: Path) -> subprocess.Popen:
    """A command in its own session, as a user's terminal would hold it; its output and errors go to
    files of the work dir (`proc.out_path`, `proc.err_path`)."""
    stem = work / "outputs" / str(time.time_ns())
    with open(f"{stem}.out", "w") as out, open(f"{stem}.err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=work, env=env_for(work),
                                stdout=out, stderr=err, start_new_session=True)
    proc.out_path, proc.err_path = f"{stem}.out", f"{stem}.err"
    STARTED.append(proc)
    return proc


def stop_started(work: Path) -> None:
    """The campaign's commands still running (an interrupted or failed campaign) and every process that
    names its folder (their trainings, in sessions of their own): SIGKILLed, so nothing outlives it."""
    import psutil

    for proc in STARTED:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    for p in processes_naming(work):
        try:
            p.kill()
        except psutil.Error:
            continue


def processes_naming(work: Path) -> list:
    """psutil processes whose command line names the campaign's folder (its commands, trainings, Slurm
    daemons), but this one and its parents."""
    import psutil

    mine, found = {os.getpid(), *(p.pid for p in psutil.Process().parents())}, []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid not in mine and str(work) in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def env_for(work: Path) -> dict[str, str]:
    env = dict(os.environ, YOLO_OFFLINE="1", YOLO_ORCH_CACHE=str(work / "cache"), WANDB_API_KEY=SECRET,
               YOLO_ORCH_REGISTRY=str(work / "runs" / "registry.db"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def children(pid: int) -> list[int]:
    import psutil

    try:
        return [p.pid for p in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def ranks_of(worker_pid: int) -> list[int]:
    """The torchrun ranks (processes running orchestrator.worker.ddp) under the launcher."""
    import psutil

    out = []
    for pid in children(worker_pid):
        try:
            if "orchestrator.worker.ddp" in " ".join(psutil.Process(pid).cmdline()):
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def signal_pid(pid: int | None, sig: int) -> None:
    if pid:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------- the run's state


def row_of(work: Path, run_id: str | None = None) -> dict | None:
    from orchestrator.registry import Registry

    path = work / "runs" / "registry.db"
    if not path.is_file():
        return None
    with Registry.open(path) as reg:
        rows = reg.list()
    rows = [r for r in rows if run_id is None or r["id"] == run_id]
    return max(rows, key=lambda r: r["created_at"]) if rows else None


def epoch_events(run_dir: Path) -> list[int]:
    """The epochs events.jsonl holds an `epoch` event for, in order (whole lines only)."""
    return [int(e["epoch"]) for e in EventTail(run_dir / "events.jsonl").read_new() if e.get("event") == "epoch"]


def glued_records(run_dir: Path) -> list[str]:
    """Lines of events.jsonl that do not parse and hold a second record: one appended to a torn line."""
    path = run_dir / "events.jsonl"
    out = []
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        try:
            json.loads(line)
        except ValueError:
            if line.find('{"event"', 1) > 0:
                out.append(line)
    return out


def wait_point(work: Path, since: float, at_epoch: int, delay: float, proc: subprocess.Popen) -> dict | None:
    """The row of the run `proc` started, once it reached `at_epoch` (0: its worker started) plus `delay`."""
    found: dict = {}

    def reached() -> bool:
        row = row_of(work)
        if row is None or row["created_at"] < since or not row.get("worker_pid"):
            return proc.poll() is not None
        found.update(row)
        done = epoch_events(Path(row["run_dir"]))
        return (max(done) if done else 0) >= at_epoch or proc.poll() is not None

    wait_for(reached, timeout=300)
    time.sleep(delay)
    return dict(found) if found else None


def wait_point_of(work: Path, run_id: str, at_epoch: int, delay: float, proc: subprocess.Popen) -> dict | None:
    """As wait_point, for a resume of `run_id`: once its new worker runs and reached `at_epoch`."""
    before = (row_of(work, run_id) or {}).get("worker_pid")

    def reached() -> bool:
        row = row_of(work, run_id)
        if proc.poll() is not None:
            return True
        if row is None or row.get("worker_pid") in (None, before) or row["state"] != "running":
            return False
        done = epoch_events(Path(row["run_dir"]))
        return (max(done) if done else 0) >= at_epoch

    wait_for(reached, timeout=300)
    time.sleep(delay)
    return row_of(work, run_id)


def finish(proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait for a command to end as a user would wait for their terminal; a hung one is a finding."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def resume_until_done(work: Path, episode: Episode) -> None:
    """What a user does after a fault: `yolo-orch resume RUN` while the run is not finished; a resume
    that ends where it began is where a user gives up."""
    wait_for(lambda: (row_of(work, episode.run_id) or {}).get("state") not in ("running", "queued"), timeout=60)
    for _ in range(MAX_RESUMES):
        row = row_of(work, episode.run_id) or {}
        episode.state = row.get("state")
        if episode.state == "finished":
            return
        r = cli("resume", episode.run_id, "--json", work=work)
        episode.resumes += 1
        if r.returncode != 0:
            episode.notes.append(f"resume exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:300]}")
    episode.state = (row_of(work, episode.run_id) or {}).get("state")
