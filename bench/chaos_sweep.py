"""The chaos campaign's sweeps (bench/chaos.py): a 2-worker sweep on a PostgreSQL server the campaign
starts itself (a temporary folder, its own port), and the faults a study meets: SIGKILL of the sweep
command or of one of its workers, the server killed and started again in the middle of a trial or at
the moment a trial reports an epoch. After each, a user runs the sweep again until it reaches its
trials; the study must then hold them all, none lost or duplicated, FAIL only where a kill struck."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from chaos_common import row_of
from orchestrator.harness.processes import descendants_running
from orchestrator.harness.runs import wait_for
from orchestrator.harness.services import PrivateServer
from orchestrator.rundir import trained_epochs

TRIALS = 3
SWEEP_EPOCHS = 3
KINDS = ("kill-sweep-parent", "kill-sweep-worker", "pg-restart-trial", "pg-restart-report")
KILLS = ("kill-sweep-parent", "kill-sweep-worker")
OUTAGE_S = 8  # longer than the sweep heartbeat's grace period (4 s)


@dataclass
class SweepEpisode:
    number: int
    kind: str
    at_epochs: int  # the fault strikes once the study's trials reported this many epochs in all
    study: str = ""
    runs: int = 0  # `yolo-orch sweep` commands it took
    summary: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    struck: bool = False
    trial_runs: list[str] = field(default_factory=list)  # what trial_runs_whole found, once the sweep ended

    @property
    def survived(self) -> bool:
        return bool(self.summary.get("reached")) and not self.problems()

    def problems(self) -> list[str]:
        trials = self.summary.get("trials") or []
        dirs = [t["run_dir"] for t in trials if t.get("run_dir")]
        fails = (self.summary.get("states") or {}).get("FAIL", 0)
        out = [f"{len(dirs) - len(set(dirs))} trial run directories twice"] if len(dirs) != len(set(dirs)) else []
        allowed = 2 if self.kind in KILLS else 0  # a kill fails the trial(s) it struck, once each
        if fails > allowed:
            out.append(f"{fails} FAIL trials (a {self.kind} may fail {allowed})")
        if "Traceback" in self.summary.get("_logs", ""):
            out.append("a traceback in the sweep's output")
        return out + self.trial_runs


def trial_runs_whole(work: Path, trials: list[dict]) -> list[str]:
    """Each COMPLETE trial's run trained every epoch once (its events.jsonl) and its registry row says
    finished with them all (the pruner is off: a complete trial trained all its epochs)."""
    out = []
    for t in trials:
        if t.get("state") != "COMPLETE" or not t.get("run_dir"):
            continue
        seen = trained_epochs(Path(t["run_dir"]) / "events.jsonl")
        if sorted(seen) != list(range(1, SWEEP_EPOCHS + 1)):
            out.append(f"trial {t['number']}: epoch events {seen}")
        row = row_of(work, t.get("run_id"))
        if row is None or row.get("state") != "finished" or row.get("epochs_done") != SWEEP_EPOCHS:
            said = None if row is None else (row["state"], row["epochs_done"])
            out.append(f"trial {t['number']}: registry row {said}")
    return out


def write_sweep(work: Path, study: str) -> Path:
    """The study's sweep file, over the campaign's job with fewer epochs (sweep-job.yaml)."""
    import yaml

    base = yaml.safe_load((work / "job.yaml").read_text())
    (work / "sweep-job.yaml").write_text(yaml.safe_dump(dict(base, name="chaos-trial", epochs=SWEEP_EPOCHS),
                                                        sort_keys=False))
    path = work / f"{study}.yaml"
    path.write_text(yaml.safe_dump({
        "study": study, "base": "sweep-job.yaml",
        "space": {"hyp": {"lr0": {"low": 1e-3, "high": 1e-2, "log": True}}},
        "pruner": "none", "budget": {"n_trials": TRIALS},
        "heartbeat": {"interval": 1, "grace_period": 4, "max_retry": 2},
    }, sort_keys=False))
    return path


def epochs_reported(url: str, study: str) -> int:
    import optuna

    from orchestrator.sweep.study import check_url, make_storage

    try:
        s = optuna.load_study(study_name=study, storage=make_storage(check_url(url)))
        return sum(len(t.intermediate_values) for t in s.get_trials(deepcopy=False))
    except Exception:  # noqa: BLE001 - not created yet, or the server is away
        return -1


def sweep_workers(pid: int) -> list[int]:
    """The sweep's worker processes under the sweep command."""
    return descendants_running(pid, "orchestrator.sweep.trial_loop")


def run_sweep_episode(work: Path, pg: PrivateServer, episode: SweepEpisode, start_cli, finish, rng) -> SweepEpisode:
    started = time.time()
    episode.study = f"chaos-{episode.number}"
    sweep = write_sweep(work, episode.study)
    proc = start_sweep(work, sweep, pg, start_cli)
    episode.runs = 1
    reached = wait_for(lambda: epochs_reported(pg.url, episode.study) >= episode.at_epochs or proc.poll() is not None,
                       poll=0.3)
    if proc.poll() is None and reached:
        episode.struck = strike_sweep(episode, proc, pg)
    finish(proc, timeout=600)
    logs, out = outputs(proc)
    while not out.get("reached") and episode.runs < 3:  # what a user does: run the sweep again
        proc = start_sweep(work, sweep, pg, start_cli)
        episode.runs += 1
        finish(proc, timeout=600)
        more, out = outputs(proc)
        logs += more
    worker_logs = "".join(p.read_text(errors="replace") for p in work.rglob("workers/*.log")
                          if episode.study in str(p))
    episode.summary = dict(out, _logs=logs + worker_logs)
    episode.trial_runs = trial_runs_whole(work, out.get("trials") or [])
    episode.wall_s = round(time.time() - started, 1)
    return episode


def start_sweep(work: Path, sweep: Path, pg: PrivateServer, start_cli):
    return start_cli("sweep", str(sweep), "--storage", pg.url, "--workers", "2", "--json", work=work)


def outputs(proc) -> tuple[str, dict]:
    """(what the command printed, its --json summary: {} when it printed none)."""
    out = Path(proc.out_path).read_text(errors="replace")
    err = Path(proc.err_path).read_text(errors="replace")
    try:
        summary = json.loads(out) if out.strip() else {}
    except ValueError:
        summary = {}
    return out + err, summary


def strike_sweep(episode: SweepEpisode, proc, pg: PrivateServer) -> bool:
    if episode.kind == "kill-sweep-parent":
        os.kill(proc.pid, signal.SIGKILL)
    elif episode.kind == "kill-sweep-worker":
        workers = sweep_workers(proc.pid)
        if not workers:
            return False
        os.kill(workers[-1], signal.SIGKILL)
    elif episode.kind == "pg-restart-trial":
        pg.stop("immediate")  # as a crash: recovered from its WAL on start
        time.sleep(OUTAGE_S)
        pg.start()
    elif episode.kind == "pg-restart-report":  # the moment a trial reports its next epoch
        before = epochs_reported(pg.url, episode.study)
        wait_for(lambda: epochs_reported(pg.url, episode.study) > before or proc.poll() is not None, poll=0.05)
        pg.stop("immediate")  # as a crash: recovered from its WAL on start
        time.sleep(OUTAGE_S)
        pg.start()
    return True
