"""The Kaggle backend of the runner: each attempt of a run is one session of a kernel on Kaggle
(`yolo-orch kaggle launch` and scripts/kaggle_tpu_launch.py hand it to runner.supervise, as `submit` hands
a process group):

    start  build the session's kernel folder, push it           (the attempt)
    wait   poll its status; once it ended, pull its outputs into runs/<job>/<run id>/
    ends   0: every epoch done | EXIT_NEXT_SESSION: the session's limit came first | 1: failed, the reason
           in its note. After EXIT_NEXT_SESSION the runner starts the next session: a new kernel
           `<slug>-sN` whose kernel_sources is the previous one.

The runner records the run's states in the registry as for every backend; this backend adds each session's
progress (epochs done, metrics, a note). Each session's kernel folder and downloaded output stay in
`<run dir>/kaggle/session-N/`; the run tarball is unpacked into the run directory itself, so it looks like a
local run (weights/, results.csv, events.jsonl, summary.json, job.resolved.yaml).
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from orchestrator.kaggle import tool
from orchestrator.kaggle.build import BuildOptions, build, session_number
from orchestrator.launch.backend import EXIT_NEXT_SESSION
from orchestrator.rundir import SUMMARY, WEIGHTS, load_resolved, new_run_id, resolved_or_none, write_json_atomic
from orchestrator.errors import EnvError, ToolError
from orchestrator.jobspec.loader import LoadedJob
from orchestrator.registry import Registry, RunState
from orchestrator.runner import add_new_run, claim_run_dir, registry_for_new_run

RESUME = "resume.json"
EXIT_FAILED = 1


class LaunchError(EnvError):
    """The loop cannot go on (a --run-id that another launch drives): one line, exit 1."""


@dataclass
class LaunchOptions:
    build: BuildOptions = field(default_factory=BuildOptions)  # out/session/run_id/resume_from are set per session
    runs_dir: Path | None = None
    poll_s: float = 60.0
    max_sessions: int = 20
    session_timeout_h: float | None = None  # default: session_hours + 3 (queueing included)


class KaggleBackend:
    """One launch's sessions: which comes next (its number, the kernel it resumes), and what each did."""

    name = "kaggle"
    watched = False  # the kernel's heartbeats come back with its outputs, hours old: the watchdog reads none

    def __init__(self, job: LoadedJob, opts: LaunchOptions, on_event: Callable[[dict], None] = lambda e: None):
        self.job, self.opts, self.on_event = job, opts, on_event
        self.run_id = opts.build.run_id or new_run_id()
        self.resume_from = opts.build.resume_from
        self.session = session_number(opts.build)
        self.sessions: list[dict] = []  # {session, kernel, status, resume}: one per session that ended
        self.last_done = -1

    def open_run(self) -> tuple[str, Path]:
        """The run's folder and queued row: a new run, or a stopped one continued with --run-id, claimed back
        as a resume claims it. The first session is built in a scratch folder before anything is written, so
        a job Kaggle cannot run leaves nothing behind."""
        spec = self.job.spec
        root = Path(self.opts.runs_dir or spec.runs_dir).expanduser().resolve()
        with tempfile.TemporaryDirectory() as scratch:
            first = self._build(Path(scratch))
            resolved = load_resolved(Path(scratch))
        row = {"job": spec.name, "devices": first.bundle["devices"], "epochs": spec.epochs,
               "tags": {"launcher": "kaggle", "kernel": first.metadata["id"]},
               "note": f"Kaggle {first.metadata['machine_shape']}: {first.metadata['id']}"}
        with Registry.open(root) as registry:
            registry.reconcile()  # a launch that vanished (kill -9) left its row running: recorded killed first
            claimed = registry.get(self.run_id)
            if claimed is not None:
                self._claim(registry, claimed, row["note"])
        if claimed is None:
            registry = registry_for_new_run(root, spec.name, self.run_id)
            _, run_dir = claim_run_dir(root / spec.name, self.run_id)
        else:
            run_dir = Path(claimed.run_dir)
        if resolved_or_none(run_dir) is None:  # else the kernel's own, come back with its outputs
            resolved.run_dir = str(run_dir)
            resolved.save(run_dir)
        if claimed is None:
            add_new_run(registry, self.run_id, run_dir=run_dir, **row)
        return self.run_id, run_dir

    def _claim(self, registry: Registry, row, note: str) -> None:
        if not row.resumable or not registry.move(self.run_id, RunState.QUEUED, expect=row.state, pid=os.getpid(),
                                                  note=note):
            raise LaunchError(f"--run-id {self.run_id} is {registry.get(self.run_id).state}: only a killed, failed "
                              "or stalled run is continued (a running one is driven by another launch)")

    def _build(self, folder: Path):
        opts = BuildOptions(**{**self.opts.build.__dict__, "out": folder, "session": self.session,
                               "run_id": self.run_id, "resume_from": self.resume_from, "force": True})
        return build(self.job, opts)

    def start(self, run_dir: Path, env: dict[str, str]) -> "KaggleSession | Ended":
        """Build and push the next session's kernel (`env` is the kernel's own: nothing of this machine's)."""
        if len(self.sessions) >= self.opts.max_sessions:
            done = self.sessions[-1]["resume"].get("epochs_done") if self.sessions else 0
            return Ended(f"stopped after {self.opts.max_sessions} sessions (--max-sessions) with {done}/"
                         f"{self.job.spec.epochs} epochs")
        folder = run_dir / "kaggle" / f"session-{self.session}"
        try:
            result = self._build(folder)  # in the run's own folder
            kernel = result.metadata["id"]
            self.on_event({"event": "built", "session": self.session, "kernel": kernel, "folder": str(folder),
                           "warnings": result.warnings})
            pushed = tool.push(folder)
        except ToolError as exc:  # bad input found late, the `kaggle` CLI's refusal: the run failed
            return Ended("; ".join(exc.problems))
        _progress(run_dir, note=f"session {self.session}: pushed {kernel}" +
                  (f" v{pushed['version']}" if pushed["version"] else ""))
        self.on_event({"event": "pushed", "session": self.session, "kernel": kernel, "url": pushed["url"],
                       "version": pushed["version"]})
        return KaggleSession(self, run_dir, kernel, folder, result.bundle["kaggle"]["session_hours"])

    def resume_hint(self) -> str:
        return (f"scripts/kaggle_tpu_launch.py JOB --run-id {self.run_id}" +
                (f" --resume-from {self.resume_from}" if self.resume_from else ""))


@dataclass
class Ended:
    """An attempt that ended before it started (nothing pushed)."""

    note: str
    pid: int = field(default_factory=os.getpid)

    def wait(self, timeout_s: float) -> int:
        return EXIT_FAILED

    def stop(self, grace_s: float = 15.0) -> int:
        return EXIT_FAILED


@dataclass
class KaggleSession:
    """One pushed session: polled every `poll_s`, pulled once it ended. Its pid is this launch's: the kernel
    runs on Kaggle, and a launch that vanished leaves the row to `reconcile`, as a runner's would."""

    backend: KaggleBackend
    run_dir: Path
    kernel: str
    folder: Path
    session_hours: float
    started: float = field(default_factory=time.time)
    next_poll: float = 0.0
    code: int | None = None
    note: str | None = None
    pid: int = field(default_factory=os.getpid)

    def wait(self, timeout_s: float) -> int | None:
        now = time.monotonic()
        if now < self.next_poll:
            time.sleep(min(timeout_s, self.next_poll - now))
            return None
        self.next_poll = now + self.backend.opts.poll_s
        try:
            self.code = self._poll()
        except ToolError as exc:  # the `kaggle` CLI's refusal, a tarball that does not belong to the run
            self.code, self.note = EXIT_FAILED, "; ".join(exc.problems)
        return self.code

    def stop(self, grace_s: float = 15.0) -> int:
        """Nothing of it runs here: a stop while it trains (Ctrl-C) says how to continue the launch."""
        if self.code is None:
            self.note = ("stopped by Ctrl-C; the Kaggle kernel may still be running. Continue with: "
                         + self.backend.resume_hint())
            return 130
        return self.code

    def _poll(self) -> int | None:
        b, session = self.backend, self.backend.session
        info = tool.status(self.kernel)
        elapsed = time.time() - self.started
        b.on_event({"event": "status", "session": session, "kernel": self.kernel, "state": info["state"],
                    "elapsed": elapsed})
        if not info["terminal"]:
            limit_h = b.opts.session_timeout_h if b.opts.session_timeout_h is not None else self.session_hours + 3
            if elapsed > limit_h * 3600:
                return self._fail(f"{self.kernel} still {info['state']} after {limit_h:.1f} h; check it on kaggle.com")
            return None
        return self._pulled(info)

    def _pulled(self, info: dict) -> int:
        """The ended session's outputs unpacked into the run: its exit, as the runner reads one."""
        b, session = self.backend, self.backend.session
        out_dir = self.folder / "output"
        if out_dir.exists():
            shutil.rmtree(out_dir)
        pulled = tool.output(self.kernel, out_dir)
        b.on_event({"event": "pulled", "session": session, "kernel": self.kernel, "files": pulled["files"]})
        state = collect(out_dir, self.run_dir, b.run_id)
        record = {"session": session, "kernel": self.kernel, "status": info["state"], "resume": state}
        b.sessions.append(record)
        b.on_event({"event": "session", **record})
        if state is None:
            return self._fail(f"session {session} ({self.kernel}) ended {info['state']} without resume.json in its "
                              f"output; its log is in {out_dir}" + _failure(info))
        done = int(state.get("epochs_done") or 0)
        _progress(self.run_dir, epochs_done=done, metrics=state.get("metrics") or None,
                  note=f"session {session}: {state.get('state')} at {done}/{b.job.spec.epochs} epochs")
        if state.get("state") == "failed" or info["state"] != "complete":
            return self._fail(f"session {session} ({self.kernel}) {info['state']}: {state.get('reason') or 'see the log'}"
                              f" (log and outputs in {out_dir})" + _failure(info))
        if state.get("done"):
            return 0
        if done <= b.last_done:
            return self._fail(f"session {session} made no progress ({done}/{b.job.spec.epochs} epochs): the session "
                              "limit is too short for one epoch; raise --session-hours or lower --margin-minutes")
        b.last_done, b.resume_from, b.session = done, self.kernel, session + 1
        return EXIT_NEXT_SESSION

    def _fail(self, note: str) -> int:
        self.note = note
        return EXIT_FAILED


def _progress(run_dir: Path, **fields) -> None:
    """A session's progress on the run's row (the runner records its states)."""
    with Registry.of_run(run_dir) as registry:
        registry.update(run_dir.name, **fields)


def _failure(info: dict) -> str:
    return f" (Kaggle: {info['failure_message']})" if info.get("failure_message") else ""


def _find(folder: Path, name: str) -> Path | None:
    hits = sorted(folder.rglob(name))
    return hits[0] if hits else None


def unpack_run(tarball: Path, run_dir: Path) -> int:
    """Extract `<run id>/...` members into run_dir (the top folder stripped); returns files written."""
    count = 0
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if not parts or Path(member.name).is_absolute() or ".." in parts:
                raise LaunchError(f"{tarball.name}: refusing member {member.name!r}")
            if len(parts) == 1 or not (member.isfile() or member.isdir()):
                continue
            target = run_dir.joinpath(*parts[1:])
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            tmp = target.with_name(f".{target.name}.part")
            with open(tmp, "wb") as f:
                shutil.copyfileobj(src, f)
            tmp.replace(target)
            count += 1
    return count


def localize(run_dir: Path) -> None:
    """Point the pulled run's files at this machine's run directory."""
    resolved = resolved_or_none(run_dir)  # the kernel's record; a damaged one is left as it came
    if resolved is not None:
        resolved.kaggle = {**(resolved.kaggle or {}), "kernel_run_dir": resolved.run_dir}
        resolved.run_dir = str(run_dir)
        resolved.save(run_dir)
    summary = run_dir / SUMMARY
    if summary.is_file():
        data = json.loads(summary.read_text())
        for key in ("best", "last"):
            if data.get(key):
                local = run_dir / WEIGHTS / Path(data[key]).name
                data[key] = str(local) if local.exists() else None
        write_json_atomic(summary, data)


def collect(out_dir: Path, run_dir: Path, run_id: str) -> dict | None:
    """Unpack the session's tarball into the run directory; return its resume.json (None if absent)."""
    resume = _find(out_dir, RESUME)
    if resume is None:
        return None
    state = json.loads(resume.read_text())
    if state.get("run_id") != run_id:
        raise LaunchError(f"{resume} belongs to run {state.get('run_id')}, not {run_id}")
    tar_name = state.get("tarball")
    tarball = _find(out_dir, tar_name) if tar_name else None
    if tarball is not None:
        unpack_run(tarball, run_dir)
        localize(run_dir)
    return state
