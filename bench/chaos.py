"""A seeded chaos campaign: real trainings, faults at random moments, and what a user would do after
each (`yolo-orch resume`), then the invariants that must hold over everything the campaign made.

    python bench/chaos.py --faults N --seed S [--json] [--kinds K,K,...] [--work DIR]

Each fault is one episode: a tiny job is submitted (one process, or `cpu:2` for the kinds that need a
rank), the fault strikes at a moment drawn from the seed (after epoch e of E, plus a delay), and the
campaign resumes the run until it finishes or a user would give up (a resume that changes nothing).
Fault kinds (KINDS): SIGKILL of the training process, of one rank, of `submit`; the same kill twice in
a row; a kill of the resume itself; SIGSTOP of one rank (the stall watchdog's case) and of the whole
run for longer than its stall timeout; a torn or corrupted events.jsonl tail and a damaged last.pt
before the resume; the disk full during a checkpoint write (a small tmpfs, root). The sweeps'
faults are chaos_sweep.py's (a PostgreSQL server of the campaign's own), the Slurm ones
chaos_slurm.py's (a one-node cluster of its own: `scontrol requeue`, a time limit), the Ray one
chaos_ray.py's (a two-node cluster of its own in a network namespace: a node lost mid-run).

Every run has the W&B default of the quickstart (`wandb:` with a project; the campaign's secret is the API
key, W&B cannot be reached, so it logs offline). A fault counts only when the path it names ran (a second
kill that came after the resume ended, a torn tail no resumed worker read): otherwise its kind is drawn
again, and the report says so. PostgreSQL, Slurm, Ray and the tmpfs start when the first fault that needs them
is drawn; SIGTERM or Ctrl-C of the campaign stops its trainings and services.

Invariants, each a line of the report: every run ends finished (resumes allowed); every epoch of every
run trained exactly once (its events.jsonl), each once in results.csv and in its W&B run (all attempts);
every checkpoint left on disk loads; the registry and the run directories agree; no process of the
campaign survives it; no secret in any file or output. An invariant whose check itself fails is a failing
line. `--json` prints the report with a top-level `lost` (runs not finished plus invariants broken).
Bad input (an unknown kind, no kind) is one line, exit 2."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import chaos_ray
import chaos_slurm
import chaos_sweep
from chaos_common import (EPOCHS, SECRET, Episode, finish, glued_records, resume_until_done, row_of, start_cli,
                          stop_started, wait_point, wait_point_of)
from orchestrator.harness import Unavailable
from orchestrator.harness.processes import children, command_line, processes_naming, ranks_of, signal_pid
from orchestrator.harness.runs import epoch_events
from orchestrator.harness.services import (PrivateServer, RayCluster, SlurmCluster, mount_small_disk, postgres_bin,
                                          unmount)
from orchestrator.rundir import EventTail, completed_epochs, resolved_or_none, trained_epochs
from orchestrator.rundir.checkpoints import results_epochs

STALL_TIMEOUT = 20


# ---------------------------------------------------------------- faults


def strike(kind: str, row: dict, proc: subprocess.Popen | None, notes: list[str]) -> None:
    """One fault on a running run (`proc`: the command that runs it)."""
    worker = row.get("worker_pid")
    if kind in ("kill-worker", "kill-twice", "torn-events", "corrupt-checkpoint"):
        signal_pid(worker, signal.SIGKILL)
    elif kind == "kill-rank":
        ranks = ranks_of(worker) if worker else []
        signal_pid(ranks[-1] if ranks else worker, signal.SIGKILL)
        notes.append(f"killed rank pid {ranks[-1] if ranks else worker} of {len(ranks)}")
    elif kind in ("kill-submit", "kill-resume"):
        signal_pid(proc.pid if proc else row.get("pid"), signal.SIGKILL)
    elif kind == "stop-rank":
        ranks = ranks_of(worker) if worker else []
        signal_pid(ranks[-1] if ranks else worker, signal.SIGSTOP)  # the watchdog ends the run as stalled
    elif kind == "disk-full":
        fill(Path(row["run_dir"]).parents[1], notes)
    elif kind == "stop-run":
        group = [proc.pid if proc else row["pid"], *children(proc.pid if proc else row["pid"])]
        for pid in group:
            signal_pid(pid, signal.SIGSTOP)
        time.sleep(STALL_TIMEOUT + 5)
        for pid in group:
            signal_pid(pid, signal.SIGCONT)


SMALL_DISK, FILLER = "small-disk", "filler.bin"  # a tmpfs the disk-full episodes run on


def fill(disk: Path, notes: list[str]) -> None:
    """The disk full but for 64 KiB, as another program filling it would leave it."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize - 64 * 1024
    try:
        with open(disk / FILLER, "wb") as f:
            while free > 0:
                free -= f.write(b"\0" * min(free, 1 << 20))
    except OSError:  # the run took the rest meanwhile: full all the same
        pass
    notes.append(f"filled the disk to {os.statvfs(disk).f_bavail * st.f_frsize // 1024} KiB free")


TORN_TAILS = (b'{"event": "epoch", "epo',  # a crash in the middle of a line: no newline
              b'\xff\xfe\x00\xc3(\x9c garbage',  # bytes that are no UTF-8 (a disk error), no newline
              b'{"event": "epoch", "epoch": \x00\x00\x00\n',  # a line of zeros (a crash before the data landed)
              b'[1, 2, 3]\n')  # JSON that is not a record


def tear_events_tail(run_dir: Path, rng: random.Random, notes: list[str]) -> int:
    """A torn or corrupted events.jsonl tail, one of TORN_TAILS; returns the file's size after it."""
    tail = rng.choice(TORN_TAILS)
    with open(run_dir / "events.jsonl", "ab") as f:
        f.write(tail)
    notes.append(f"events.jsonl tail: {tail[:24]!r}")
    return (run_dir / "events.jsonl").stat().st_size


def damage_checkpoint(run_dir: Path, rng: random.Random, notes: list[str]) -> None:
    """weights/last.pt cut short at a random length, or a few of its bytes flipped (a copy cut short, a
    failing disk); the rest of the run directory as the kill left it."""
    last = run_dir / "weights" / "last.pt"
    if not last.is_file():
        notes.append("no last.pt to damage")
        return
    data = bytearray(last.read_bytes())
    if rng.random() < 0.5:
        cut = rng.randint(0, len(data) - 1)
        data = data[:cut]
        notes.append(f"last.pt cut to {cut} of its bytes")
    else:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] ^= rng.randint(1, 255)
        notes.append("last.pt: bytes flipped")
    last.write_bytes(bytes(data))


RUN_KINDS = ("kill-worker", "kill-rank", "kill-submit", "kill-twice", "kill-resume", "stop-rank", "stop-run",
             "torn-events", "disk-full", "corrupt-checkpoint")
KINDS = RUN_KINDS + chaos_sweep.KINDS + chaos_slurm.KINDS + chaos_ray.KINDS
NEEDS_RANKS = ("kill-rank", "stop-rank")


def run_episode(work: Path, episode: Episode, rng: random.Random) -> Episode:
    started = time.time()
    since = time.time()
    disk = work / SMALL_DISK
    runs_dir = ["--set", f"runs_dir={disk}"] if episode.kind == "disk-full" else []
    proc = start_cli("submit", "job.yaml", "--json", "--devices", episode.devices, *runs_dir, work=work)
    row = wait_point(work, since, episode.at_epoch, episode.delay_s, proc)
    if row is None:
        proc.wait(timeout=60)
        episode.notes.append("the run did not start")
        return episode
    episode.run_id, episode.run_dir = row["id"], row["run_dir"]
    alive = proc.poll() is None
    if alive:
        strike(episode.kind, row, proc, episode.notes)
    finish(proc)
    after = (row_of(work, episode.run_id) or {}).get("state")
    episode.struck = alive and (episode.kind == "stop-run" or after != "finished")
    if not episode.struck:
        return episode
    torn_at = None
    if episode.kind == "torn-events":
        torn_at = tear_events_tail(Path(episode.run_dir), rng, episode.notes)
    if episode.kind == "corrupt-checkpoint":
        damage_checkpoint(Path(episode.run_dir), rng, episode.notes)
    if episode.kind == "disk-full":  # what a user does: free space, then resume
        (disk / FILLER).unlink(missing_ok=True)
    if episode.kind in ("kill-twice", "kill-resume"):  # the fault again, during the resume
        again = completed_epochs(Path(episode.run_dir)) + rng.randint(0, 1)
        resume = start_cli("resume", episode.run_id, "--json", work=work)
        now = wait_point_of(work, episode.run_id, again, rng.uniform(0, 0.8), resume)
        if resume.poll() is None and now is not None:
            strike("kill-worker" if episode.kind == "kill-twice" else "kill-resume", now, resume, episode.notes)
            episode.notes.append(f"struck again after epoch {again}")
        else:  # the path the kind names (a fault during a resume) never ran
            episode.struck = False
            episode.notes.append("the resume ended before the second fault")
        finish(resume)
        episode.resumes += 1
    resume_until_done(work, episode)
    if torn_at is not None and not resumed_after(Path(episode.run_dir), torn_at):
        episode.struck = False  # closed as finished without a worker: nothing read past the torn tail
        episode.notes.append("no resumed worker ran after the torn tail")
    episode.wall_s = round(time.time() - started, 1)
    return episode


def resumed_after(run_dir: Path, offset: int) -> bool:
    """A training process started (a `train_start` event) in events.jsonl past byte `offset`."""
    tail = EventTail(run_dir / "events.jsonl")
    tail.offset = offset
    return any(e.get("event") == "train_start" for e in tail.read_new())


# ---------------------------------------------------------------- invariants


def check_invariants(work: Path, episodes: list[Episode], service_folders: list[Path] = ()) -> list[dict]:
    """Each invariant: {name, holds, detail}."""
    runs = [e for e in episodes if e.run_dir]
    out = []
    unfinished = [f"{e.run_id} ({e.kind}: {e.state}; {'; '.join(e.notes)})" for e in runs if e.state != "finished"]
    out.append(_inv("every run finished", not unfinished, unfinished))
    stopped = [f"{e.run_id}: needed {e.resumes} resume(s)" for e in runs if e.kind == "stop-run" and e.resumes]
    out.append(_inv("a run stopped and continued as a whole is not taken for a stall", not stopped, stopped))
    wrong = []
    for e in runs:
        seen = trained_epochs(Path(e.run_dir) / "events.jsonl")  # less the epochs a rewind declared trained again
        if e.state == "finished" and sorted(seen) != list(range(1, EPOCHS + 1)):
            wrong.append(f"{e.run_id} ({e.kind}): epoch events {epoch_events(Path(e.run_dir))}")
        rewinds = [r for r in EventTail(Path(e.run_dir) / "events.jsonl").read_new() if r.get("event") == "rewind"]
        if rewinds and e.kind != "corrupt-checkpoint":
            wrong.append(f"{e.run_id} ({e.kind}): epochs trained again with no damaged checkpoint: {rewinds}")
        wrong += [f"{e.run_id} ({e.kind}): a record glued to a torn line, lost: {line[:100]}"
                  for line in glued_records(Path(e.run_dir))]
    out.append(_inv("every epoch trained exactly once, no event lost", not wrong, wrong))
    for name, check in (("results.csv holds every epoch once", lambda: results_once(runs)),
                        ("the run's W&B run holds every epoch once", lambda: wandb_once(runs)),
                        ("every checkpoint loads", lambda: checkpoints_load(work)),
                        ("the registry and the run directories agree", lambda: registry_agrees(work, runs)),
                        ("no process of the campaign survives", lambda: no_survivors(work, service_folders)),
                        ("no secret in any file or output", lambda: no_secret(work))):
        out.append(_checked(name, check))
    return out


def _inv(name: str, holds: bool, detail: list[str]) -> dict:
    return {"name": name, "holds": bool(holds), "detail": detail[:20]}


def _checked(name: str, check) -> dict:
    """An invariant whose check itself failed is a failing, named line of the report (never a report
    that is not written)."""
    try:
        return _inv(name, *check())
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        return _inv(name, False, [f"the check failed: {type(exc).__name__}: {str(exc)[:200]}"])


def results_once(runs: list[Episode]) -> tuple[bool, list[str]]:
    """Users plot results.csv: a finished run's rows are epochs 1..E, each once (an epoch trained again
    has its first row in results.rewound.csv)."""
    wrong = []
    for e in runs:
        if e.state == "finished":
            rows = results_epochs(Path(e.run_dir))
            if rows != list(range(1, EPOCHS + 1)):
                wrong.append(f"{e.run_id} ({e.kind}): results.csv epochs {rows}")
    return not wrong, wrong


def wandb_once(runs: list[Episode]) -> tuple[bool, list[str]]:
    """The job's W&B default is on: every attempt of a run logs to the same W&B run (an offline folder
    each), and together they hold epochs 1..E, each once, in order."""
    from orchestrator.worker.wandb_history import attempt_files, logged_epochs

    wrong = []
    for e in runs:
        if e.state == "finished":
            wandb_dir, wandb_id = Path(e.run_dir) / "wandb", e.run_id.replace(".", "-")
            logged = logged_epochs(wandb_dir, wandb_id)
            if logged != list(range(1, EPOCHS + 1)):
                wrong.append(f"{e.run_id} ({e.kind}): W&B epochs {logged} over "
                             f"{len(attempt_files(wandb_dir, wandb_id))} attempt(s)")
    return not wrong, wrong


def checkpoints_load(work: Path) -> tuple[bool, list[str]]:
    """Every checkpoint the campaign's runs and sweep trials left (weights/*.pt) loads."""
    import torch

    bad = []
    for pt in sorted(work.rglob("weights/*.pt")):
        try:
            torch.load(pt, map_location="cpu", weights_only=False)
        except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
            bad.append(f"{pt}: {type(exc).__name__}: {str(exc)[:120]}")
    return not bad, bad


def registry_agrees(work: Path, runs: list[Episode]) -> tuple[bool, list[str]]:
    wrong = []
    for e in runs:
        row = row_of(work, e.run_id) or {}
        summary = Path(e.run_dir, "summary.json")
        if row.get("state") == "finished":
            data = json.loads(summary.read_text()) if summary.is_file() else {}
            if data.get("state") != "finished" or int(row.get("epochs_done") or 0) != EPOCHS:
                wrong.append(f"{e.run_id}: registry finished ({row.get('epochs_done')} epochs), "
                             f"summary {data.get('state')}")
    return not wrong, wrong


def no_survivors(work: Path, service_folders: list[Path] = ()) -> tuple[bool, list[str]]:
    """No process names the campaign's folder or a folder its services lived in (their daemons)."""
    pids = {pid for folder in (work, *service_folders) for pid in processes_naming(str(folder))}
    alive = [f"pid {pid}: {(command_line(pid) or '')[:160]}" for pid in sorted(pids)]
    return not alive, alive


def no_secret(work: Path) -> tuple[bool, list[str]]:
    """No file the tool, its runs or its commands wrote holds the secret (the Slurm controller's own state,
    outside the campaign's folder, keeps each job's submission environment, as every Slurm cluster does in
    its root-only spool)."""
    found = []
    for path in work.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and SECRET.encode() in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue
    return not found, found


# ---------------------------------------------------------------- the campaign


def draw_episodes(seed: int, kinds: tuple[str, ...]):
    """Every kind in turn (so a short campaign covers them all), each at a moment drawn from the seed.
    Send it the kind of an episode whose run ended before the fault struck: that kind is drawn again
    next, at another moment (else a short campaign would miss it and count another kind twice)."""
    rng = random.Random(seed)
    order = list(kinds)
    rng.shuffle(order)
    number, turn = 0, 0
    again = None
    while True:
        if again is None:
            kind = order[turn % len(order)]
            turn += 1
        else:
            kind = again
        number += 1
        if kind in chaos_sweep.KINDS:
            again = yield chaos_sweep.SweepEpisode(number, kind, rng.randint(1, 5))
            continue
        devices = chaos_ray.DEVICES if kind in chaos_ray.KINDS else "cpu:2" if kind in NEEDS_RANKS or \
            rng.random() < 0.3 else "cpu"
        last = EPOCHS - 3 if kind in ("kill-twice", "kill-resume") else EPOCHS - 2 if kind == "stop-run" else EPOCHS - 1
        at = rng.randint(1, last)  # (room left for the second fault, or for the run to go on after a stop)
        again = yield Episode(number, kind, devices, at, round(rng.uniform(0.0, 0.8), 2))


def write_job(work: Path) -> None:
    import yaml

    job = {"name": "chaos", "model": "yolo11n.yaml",  # epochs of about a second on 2 cores: room to strike in
           "data": {"synth": {"images": 32, "val_images": 8, "classes": 2, "imgsz": 64, "seed": 1}},
           "epochs": EPOCHS, "imgsz": 64, "seed": 0,
           "hyp": {"preset": "scratch-default", "optimizer": "AdamW", "lr0": 0.002},
           "reference": {"devices": 1, "batch": 8}, "target": {"devices": "cpu"},
           "wandb": {"project": "yolo-orch-chaos"},  # the default users run (the quickstart's section)
           "overrides": {"workers": 0, "plots": False}, "stall_timeout": STALL_TIMEOUT, "runs_dir": "runs"}
    (work / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))


class Services:
    """What the drawn faults need, started when the first episode that needs it is drawn (a campaign
    of run faults starts no PostgreSQL, Slurm or tmpfs) and stopped at the end, however it ends."""

    def __init__(self, work: Path):
        self.work, self._pg, self._cluster, self._ray, self._disk = work, None, None, None, False
        # where the PostgreSQL server and the Slurm and Ray clusters lived (their processes name them)
        self.folders: list[Path] = []

    @property
    def pg(self):
        if self._pg is None:
            self._pg = PrivateServer()
            self.folders.append(self._pg.folder)
        return self._pg

    @property
    def cluster(self):
        if self._cluster is None:
            self._cluster = SlurmCluster()
            self.folders.append(self._cluster.folder)
        return self._cluster

    @property
    def ray(self):
        if self._ray is None:
            self._ray = RayCluster(2)
            self.folders.append(self._ray.folder)
        return self._ray

    def small_disk(self) -> None:
        if not self._disk:
            mount_small_disk(self.work / SMALL_DISK, 300)
            self._disk = True

    def stop_daemons(self) -> None:
        """PostgreSQL, Slurm and Ray stopped (again: a no-op), before the invariants: no process may survive."""
        if self._pg is not None:
            self._pg.remove()
        if self._cluster is not None:
            self._cluster.stop()
        if self._ray is not None:
            self._ray.stop()
        self._pg, self._cluster, self._ray = None, None, None

    def stop(self) -> None:
        """Everything started, stopped; the tmpfs last (the invariants read the runs on it)."""
        self.stop_daemons()
        if self._disk:
            unmount(self.work / SMALL_DISK)
        self._disk = False


class Terminated(Exception):
    """SIGTERM or SIGHUP (a closed terminal) of the campaign: it stops its trainings and services, as Ctrl-C does."""


def _raise_terminated(signum, frame):
    raise Terminated(f"signal {signum}")


STOPPING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def services_stopped_however_it_ends(work: Path):
    """The campaign's services (Services), stopped at the end however it ends: a return, an exception, Ctrl-C, and
    SIGTERM or SIGHUP, which would otherwise end the process without its `finally` (a PostgreSQL server left
    running, its folder left behind); then the commands and trainings a fault or an interruption left running."""
    services = Services(work)
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in STOPPING_SIGNALS}
    try:
        yield services
    finally:
        services.stop()
        stop_started(work)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def campaign(n: int, seed: int, kinds: tuple[str, ...], work: Path, say=print) -> dict:
    (work / "outputs").mkdir(parents=True, exist_ok=True)
    write_job(work)
    with services_stopped_however_it_ends(work) as services:
        return run_campaign(n, seed, kinds, work, say, services)


def run_campaign(n: int, seed: int, kinds: tuple[str, ...], work: Path, say, services: Services) -> dict:
    started = time.time()
    rng = random.Random(seed + 1)
    episodes, missed = [], 0
    draws = draw_episodes(seed, kinds)
    episode = next(draws)
    try:
        while len(episodes) < n and missed <= 2 * n:
            if isinstance(episode, chaos_sweep.SweepEpisode):
                chaos_sweep.run_sweep_episode(work, services.pg, episode, start_cli, finish, rng)
            elif episode.kind in chaos_slurm.KINDS:
                chaos_slurm.run_slurm_episode(work, services.cluster, episode, rng)
            elif episode.kind in chaos_ray.KINDS:
                chaos_ray.run_ray_episode(work, services.ray, episode)
            else:
                if episode.kind == "disk-full":
                    services.small_disk()
                run_episode(work, episode, rng)
            if not episode.struck:  # the fault's path never ran (the run ended first): the kind is drawn again
                missed += 1
                why = episode.notes[-1] if episode.notes else "it ended before the fault struck"
                say(f"(episode {episode.number}: {episode.kind} not exercised: {why}; drawn again)")
                episode = draws.send(episode.kind)
                continue
            episodes.append(episode)
            say(f"fault {len(episodes)}/{n} {describe(episode)}")
            episode = draws.send(None)
    finally:
        services.stop_daemons()
    invariants = check_invariants(work, [e for e in episodes if isinstance(e, Episode)], services.folders)
    invariants.insert(2, studies_whole([e for e in episodes if isinstance(e, chaos_sweep.SweepEpisode)]))
    by_kind: dict[str, dict] = {}
    for e in episodes:
        k = by_kind.setdefault(e.kind, {"injected": 0, "survived": 0})
        k["injected"] += 1
        k["survived"] += int(e.survived)
    lost_runs = sum(1 for e in episodes if not e.survived)
    return {"seed": seed, "faults": len(episodes), "missed_redrawn": missed, "by_kind": by_kind,
            "survived": sum(e.survived for e in episodes), "runs_lost": lost_runs, "invariants": invariants,
            "lost": lost_runs + sum(1 for i in invariants if not i["holds"]), "wall_s": round(time.time() - started, 1),
            "episodes": [{k: v for k, v in e.__dict__.items() if k != "summary"}
                         | {"survived": e.survived} for e in episodes]}


def describe(episode) -> str:
    if isinstance(episode, chaos_sweep.SweepEpisode):
        states = episode.summary.get("states")
        return (f"{episode.kind} on study {episode.study} after {episode.at_epochs} epoch report(s): "
                f"{'reached' if episode.summary.get('reached') else 'NOT reached'} {states} after "
                f"{episode.runs} sweep command(s) ({episode.wall_s} s)"
                + (f" [{'; '.join(episode.problems())}]" if episode.problems() else ""))
    resolved = resolved_or_none(Path(episode.run_dir)) if episode.run_dir else None
    recorded = len(resolved.resumes) if resolved else 0  # a resume killed before it claimed the run: not one
    return (f"{episode.kind} on {episode.devices} after epoch {episode.at_epoch} +{episode.delay_s}s: "
            f"{episode.state} after {episode.resumes} resume command(s), {recorded} resume(s) recorded by the run "
            f"({episode.wall_s} s)"
            + (f" [{'; '.join(episode.notes)}]" if episode.notes else ""))


def studies_whole(sweeps: list) -> dict:
    """Every study reached its trials, none lost or duplicated, FAIL only where a kill struck, and no
    command of the sweep printed a traceback."""
    wrong = [f"{e.study} ({e.kind}): " + ("; ".join(e.problems()) or "did not reach its trials")
             for e in sweeps if not e.survived]
    return _inv("every study reached its trials, none lost or duplicated", not wrong, wrong)


def parse_kinds(text: str | None) -> tuple[str, ...]:
    if not text:
        return KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if not kinds:
        raise SystemExit2(f"--kinds: no fault kind in {text!r}; expected some of {', '.join(KINDS)}")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise SystemExit2(f"--kinds: unknown fault kind {', '.join(unknown)}; expected some of {', '.join(KINDS)}")
    return kinds


class SystemExit2(Exception):
    """Bad input: one line, exit 2."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--faults", type=int, default=len(KINDS), help="faults to inject (episodes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the report as JSON (top-level `lost`)")
    ap.add_argument("--kinds", default=None, help=f"comma-separated subset of: {', '.join(KINDS)}")
    ap.add_argument("--work", type=Path, default=None, help="the campaign's folder (default: a new temporary one)")
    args = ap.parse_args(argv)
    try:
        kinds = parse_kinds(args.kinds)
        if args.faults < 1:
            raise SystemExit2(f"--faults: {args.faults} must be at least 1")
        if "disk-full" in kinds and os.geteuid() != 0:
            raise SystemExit2("--kinds: disk-full mounts a small tmpfs, which needs root (or leave out disk-full)")
        if set(kinds) & set(chaos_slurm.KINDS) and chaos_slurm.usable():
            raise SystemExit2(f"--kinds: the Slurm faults need a Slurm cluster of the campaign's own: "
                              f"{chaos_slurm.usable()} (or leave out {', '.join(chaos_slurm.KINDS)})")
        if set(kinds) & set(chaos_ray.KINDS) and chaos_ray.usable():
            raise SystemExit2(f"--kinds: the Ray fault needs a Ray cluster of the campaign's own: {chaos_ray.usable()} "
                              f"(or leave out {', '.join(chaos_ray.KINDS)})")
        if set(kinds) & set(chaos_sweep.KINDS) and postgres_bin() is None:
            raise SystemExit2("--kinds: the sweep faults need a PostgreSQL server of the campaign's own, and there are "
                              "no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql, or "
                              f"leave out {', '.join(chaos_sweep.KINDS)})")
    except SystemExit2 as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    work = (args.work or Path(tempfile.mkdtemp(prefix="yolo-orch-chaos-"))).resolve()
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.json else (lambda m: print(m, flush=True))
    try:
        report = campaign(args.faults, args.seed, kinds, work, say)
    except Unavailable as exc:
        print(f"chaos: --kinds: the campaign could not start its Slurm or Ray cluster: {exc} (or leave out "
              f"{', '.join(chaos_slurm.KINDS + chaos_ray.KINDS)})", file=sys.stderr)
        return 2
    except (Terminated, KeyboardInterrupt) as exc:
        print(f"chaos: stopped ({exc or 'Ctrl-C'}); its trainings and services are stopped, its folder is {work}",
              file=sys.stderr)
        return 143 if isinstance(exc, Terminated) else 130
    except Exception as exc:  # noqa: BLE001 - a campaign that broke is a finding, reported as one
        import traceback

        traceback.print_exc()
        report = {"seed": args.seed, "faults": 0, "survived": 0, "lost": 1, "wall_s": 0, "invariants": [
            _inv("the campaign ran to its end", False, [f"{type(exc).__name__}: {str(exc)[:300]}"])]}
    report["work"] = str(work)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for inv in report["invariants"]:
            print(f"{'ok  ' if inv['holds'] else 'FAIL'} {inv['name']}"
                  + "".join(f"\n       {d}" for d in inv["detail"]))
        print(f"{report['survived']}/{report['faults']} faults survived; lost {report['lost']}; {report['wall_s']} s")
    return 0 if report["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
