"""What the chaos campaign's parts share (bench/chaos.py, chaos_sweep.py, chaos_slurm.py, chaos_ray.py): its episodes,
its environment, the commands it started, a run's state as the registry and its events say it, and the
user's part after a fault. Commands, processes, events and the one wait are the harness's
(orchestrator/harness/)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.harness.cli import cli_env, run_cli
from orchestrator.harness.cli import start_cli as harness_start_cli
from orchestrator.harness.processes import processes_naming, signal_pid
from orchestrator.harness.runs import epoch_events, newest_row, wait_for

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


# ---------------------------------------------------------------- processes


def cli(*args: str, work: Path, timeout: float = 600, prefix: tuple[str, ...] = (),
        env: dict | None = None) -> subprocess.CompletedProcess:
    """A command run to its end in the campaign's environment (`env`: another; `prefix`: what runs it, a
    Ray cluster's network namespace)."""
    return run_cli(*args, cwd=work, env=env or env_for(work), timeout=timeout, prefix=prefix)


STARTED: list[subprocess.Popen] = []  # every command start_cli started (stop_started ends those left)


def start_cli(*args: str, work: Path) -> subprocess.Popen:
    """A command in its own session, as a user's terminal would hold it; its output and errors go to
    files of the work dir (`proc.out_path`, `proc.err_path`)."""
    proc = harness_start_cli(*args, cwd=work, env=env_for(work), outputs=work / "outputs")
    STARTED.append(proc)
    return proc


def stop_started(work: Path) -> None:
    """The campaign's commands still running (an interrupted or failed campaign) and every process that
    names its folder (their trainings, in sessions of their own): SIGKILLed, so nothing outlives it."""
    for proc in STARTED:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    for pid in processes_naming(str(work)):
        signal_pid(pid, signal.SIGKILL)


def env_for(work: Path) -> dict[str, str]:
    """The campaign's environment: offline, its own cache and registry, a secret that must leak nowhere."""
    return cli_env({"YOLO_OFFLINE": "1", "YOLO_ORCH_CACHE": str(work / "cache"), "WANDB_API_KEY": SECRET,
                    "YOLO_ORCH_REGISTRY": str(work / "runs" / "registry.db")})


# ---------------------------------------------------------------- the run's state


def row_of(work: Path, run_id: str | None = None) -> dict | None:
    """The campaign's newest run (or `run_id`'s row) in its registry, in its JSON form (as `yolo-orch runs
    --json` prints it: what a user's script reads)."""
    run = newest_row(work / "runs" / "registry.db", run_id)
    return run.as_dict() if run is not None else None


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


def wait_point(work: Path, since: float, at_epoch: int, delay: float, proc: subprocess.Popen,
               placed: bool = False) -> dict | None:
    """The row of the run `proc` started, once it reached `at_epoch` (0: its worker started) plus `delay`.
    `placed`: the run trains elsewhere (on Ray) and has no worker pid here; its row running says it started."""
    found: dict = {}

    def reached() -> bool:
        row = row_of(work)
        started = row is not None and (row["state"] == "running" if placed else row.get("worker_pid"))
        if not started or row["created_at"] < since:
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


def resume_until_done(work: Path, episode: Episode, prefix: tuple[str, ...] = (), env: dict | None = None) -> None:
    """What a user does after a fault: `yolo-orch resume RUN` while the run is not finished (where its cluster
    is: `prefix`, `env`); a resume that ends where it began is where a user gives up."""
    wait_for(lambda: (row_of(work, episode.run_id) or {}).get("state") not in ("running", "queued"), timeout=60)
    for _ in range(MAX_RESUMES):
        row = row_of(work, episode.run_id) or {}
        episode.state = row.get("state")
        if episode.state == "finished":
            return
        r = cli("resume", episode.run_id, "--json", work=work, prefix=prefix, env=env)
        episode.resumes += 1
        if r.returncode != 0:
            episode.notes.append(f"resume exit {r.returncode}: {(r.stderr.strip().splitlines() or [''])[-1][:300]}")
    episode.state = (row_of(work, episode.run_id) or {}).get("state")
