"""The whole Kaggle loop for one job (scripts/kaggle_tpu_launch.py drives it with a display):

    build -> push -> poll status -> pull outputs into runs/<job>/<run id>/ -> registry
       ^                                                      |
       +---- session stopped before the limit: next session --+
             (a new kernel `<slug>-sN` with kernel_sources = the previous one)

Each session's kernel folder and downloaded output stay in `<run dir>/kaggle/session-N/`; the
run tarball is unpacked into the run directory itself, so it looks like a local run
(weights/, results.csv, events.jsonl, summary.json, job.resolved.yaml).
"""

from __future__ import annotations

import json
import shutil
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from orchestrator.kaggle import tool
from orchestrator.kaggle.build import BuildOptions, build
from orchestrator.rundir import SUMMARY, WEIGHTS, new_run_id, resolved_or_none, write_json_atomic
from orchestrator.errors import EnvError, ToolError
from orchestrator.jobspec.loader import LoadedJob
from orchestrator.registry import Registry, RunState

RESUME = "resume.json"


class LaunchError(EnvError):
    """A session failed or the loop cannot go on (the service or the machine: exit 1); the message says what
    to look at."""


@dataclass
class LaunchOptions:
    build: BuildOptions = field(default_factory=BuildOptions)  # out/session/run_id/resume_from are set per session
    runs_dir: Path | None = None
    poll_s: float = 60.0
    max_sessions: int = 20
    session_timeout_h: float | None = None  # default: session_hours + 3 (queueing included)


@dataclass
class LaunchOutcome:
    run_id: str
    run_dir: Path
    state: RunState  # finished | failed | killed
    sessions: list[dict]
    resume: dict | None
    message: str = ""


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


def register(registry: Registry, run_id: str, **fields: Any) -> None:
    """The run's row, queued for this loop: added, or a stopped run continued with --run-id claimed back
    (compare-and-set, as a resume claims it). A run that another loop still drives, or that finished, is refused."""
    import os

    registry.reconcile()  # a loop that vanished (kill -9) left its row running: recorded killed first
    row = registry.get(run_id)
    if row is None:
        registry.add_run(run_id, **fields)
    elif not row.resumable or not registry.move(run_id, RunState.QUEUED, expect=row.state, pid=os.getpid(),
                                                note=fields.get("note")):
        raise LaunchError(f"--run-id {run_id} is {registry.get(run_id).state}: only a killed, failed or stalled "
                          "run is continued (a running one is driven by another launch)")


def launch(job: LoadedJob, opts: LaunchOptions, on_event: Callable[[dict], None] = lambda e: None,
           sleep: Callable[[float], None] = time.sleep) -> LaunchOutcome:
    spec = job.spec
    base = opts.build
    runs_root = Path(opts.runs_dir or spec.runs_dir).expanduser().resolve()
    run_id = base.run_id or new_run_id()
    run_dir = runs_root / spec.name / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    registry = Registry.open(runs_root)
    resume_from = base.resume_from
    session = base.session or 1
    if resume_from and base.session is None:
        import re

        m = re.search(r"-s(\d+)$", resume_from)
        session = int(m.group(1)) + 1 if m else 2
    try:
        return _loop(job, opts, base, spec, run_id, run_dir, registry, resume_from, session, on_event, sleep)
    finally:
        registry.close()


def _loop(job, opts, base, spec, run_id, run_dir, registry, resume_from, session, on_event, sleep) -> LaunchOutcome:
    sessions: list[dict] = []
    state: dict | None = None
    registered = False
    last_done = -1
    try:
        while True:
            if len(sessions) >= opts.max_sessions:
                raise LaunchError(f"stopped after {opts.max_sessions} sessions (--max-sessions) with "
                                  f"{(state or {}).get('epochs_done')}/{spec.epochs} epochs")
            folder = run_dir / "kaggle" / f"session-{session}"
            opts_s = BuildOptions(**{**base.__dict__, "out": folder, "session": session, "run_id": run_id,
                                     "resume_from": resume_from, "force": True})  # the run's own folder
            result = build(job, opts_s)
            kernel = result.metadata["id"]
            on_event({"event": "built", "session": session, "kernel": kernel, "folder": str(folder),
                      "warnings": result.warnings})
            if not registered:
                register(registry, run_id, job=spec.name, run_dir=run_dir, devices=result.bundle["devices"],
                         epochs=spec.epochs, tags={"launcher": "kaggle", "kernel": kernel},
                         note=f"Kaggle {result.metadata['machine_shape']}: {kernel}")
                registered = True
            pushed = tool.push(folder)
            registry.move(run_id, RunState.RUNNING, started_at=time.time(),
                          note=f"session {session}: pushed {kernel}" + (f" v{pushed['version']}" if pushed['version'] else ""))
            on_event({"event": "pushed", "session": session, "kernel": kernel, "url": pushed["url"],
                      "version": pushed["version"]})
            info = poll(kernel, opts, session, on_event, sleep, result.bundle["kaggle"]["session_hours"])
            out_dir = folder / "output"
            if out_dir.exists():
                shutil.rmtree(out_dir)
            pulled = tool.output(kernel, out_dir)
            on_event({"event": "pulled", "session": session, "kernel": kernel, "files": pulled["files"]})
            state = collect(out_dir, run_dir, run_id)
            record = {"session": session, "kernel": kernel, "status": info["state"], "resume": state}
            sessions.append(record)
            on_event({"event": "session", **record})
            if state is None:
                raise LaunchError(f"session {session} ({kernel}) ended {info['state']} without resume.json in its "
                                  f"output; its log is in {out_dir}" + _failure(info))
            done = int(state.get("epochs_done") or 0)
            registry.update(run_id, epochs_done=done, metrics=state.get("metrics") or None,
                            note=f"session {session}: {state.get('state')} at {done}/{spec.epochs} epochs")
            if state.get("state") == "failed" or info["state"] != "complete":
                raise LaunchError(f"session {session} ({kernel}) {info['state']}: {state.get('reason') or 'see the log'} "
                                  f"(log and outputs in {out_dir})" + _failure(info))
            if state.get("done"):
                break
            if done <= last_done:
                raise LaunchError(f"session {session} made no progress ({done}/{spec.epochs} epochs): the session "
                                  "limit is too short for one epoch; raise --session-hours or lower --margin-minutes")
            last_done = done
            resume_from, session = kernel, session + 1
    except KeyboardInterrupt:
        note = ("stopped by Ctrl-C; the Kaggle kernel may still be running. Continue with: "
                f"scripts/kaggle_tpu_launch.py JOB --run-id {run_id}" +
                (f" --resume-from {resume_from}" if resume_from else ""))
        if registered:
            registry.move(run_id, RunState.KILLED, ended_at=time.time(), note=note)
        return LaunchOutcome(run_id, run_dir, RunState.KILLED, sessions, state, note)
    except ToolError as exc:  # a session that failed, bad input, the `kaggle` CLI's refusal: the run failed
        message = "; ".join(exc.problems)
        if registered:
            registry.move(run_id, RunState.FAILED, ended_at=time.time(), note=message[:500],
                          epochs_done=int((state or {}).get("epochs_done") or 0))
        return LaunchOutcome(run_id, run_dir, RunState.FAILED, sessions, state, message)
    registry.move(run_id, RunState.FINISHED, ended_at=time.time(), exit_code=0,
                  epochs_done=int(state.get("epochs_done") or 0), metrics=state.get("metrics") or None)
    on_event({"event": "done", "run_dir": str(run_dir), "resume": state})
    return LaunchOutcome(run_id, run_dir, RunState.FINISHED, sessions, state,
                         f"{state.get('epochs_done')}/{spec.epochs} epochs in {len(sessions)} session(s)")


def _failure(info: dict) -> str:
    return f" (Kaggle: {info['failure_message']})" if info.get("failure_message") else ""


def poll(kernel: str, opts: LaunchOptions, session: int, on_event, sleep, session_hours: float) -> dict:
    limit_h = opts.session_timeout_h if opts.session_timeout_h is not None else session_hours + 3
    started = time.time()
    while True:
        info = tool.status(kernel)
        on_event({"event": "status", "session": session, "kernel": kernel, "state": info["state"],
                  "elapsed": time.time() - started})
        if info["terminal"]:
            return info
        if time.time() - started > limit_h * 3600:
            raise LaunchError(f"{kernel} still {info['state']} after {limit_h:.1f} h; check it on kaggle.com")
        sleep(opts.poll_s)


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
