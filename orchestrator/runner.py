"""A run's life: create the run directory and its registry row, start attempts of its training on the
launcher's backend (launch/backend.py), tail its events, restart it after an out-of-memory exit with a
re-planned batch (plan/replan.py) and after a session that ended at its limit, and record how it ended.
`yolo-orch submit`, `resume` (resume.py), every sweep trial and every Kaggle session come through here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from orchestrator import launch
from orchestrator.plan import replan
from orchestrator.launch import process
from orchestrator.launch.backend import EXIT_NEXT_SESSION, Backend
from orchestrator.launch.slurm_backend import SLURM_DIR
from orchestrator.rundir import (BEST, DEADLINE_STOP, ENV, ENV_SUPERVISOR_PID, ENV_SUPERVISOR_START, EVENTS,
                                 EXIT_NOT_RESUMABLE, EXIT_OOM, HEARTBEATS, LAST, LOG, RESOLVED, RESULTS, STACKS, SUMMARY,
                                 EventTail, EventWriter, OomStep, TrialLink, completed_epochs, dump_yaml, end_torn_line,
                                 failure_cause, load_resolved, missing_epochs, run_summary, say_in_log, new_run_id,
                                 process_identity, write_json_atomic, write_text_atomic)
from orchestrator.rundir.checkpoints import set_aside_damaged_weights
from orchestrator.data.cache import make_synth_data
from orchestrator.plan import Plan
from orchestrator.registry import Registry, RunState
from orchestrator.errors import EXIT_EXPORT_FAILED, UserError
from orchestrator.exports import describe, failed_exports, run_exports
from orchestrator.rundir.tracking import EXPORTS, MLFLOW_RECORD, TENSORBOARD
from orchestrator.tracking import effective_mlflow, runs_root
from orchestrator.urls import redact_text
from orchestrator.wandb_mode import resolve_mode
from orchestrator.watchdog import Stall, Watchdog, dump_stacks

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class RunOutcome:
    run_id: str
    run_dir: Path
    state: RunState  # finished | failed | killed | stalled
    exit_code: int
    summary: dict | None = None
    events: list[dict] = field(default_factory=list)
    oom_recoveries: list[OomStep] = field(default_factory=list)  # one record per OOM restart (plan/replan.py)
    note: str | None = None  # why it failed, and how to continue (also the registry row's note)
    epochs: int | None = None  # the plan's epochs, and how many were checkpointed (a killed run has no
    epochs_done: int | None = None  # summary.json, yet its epochs and best.pt are there)

    @property
    def last_checkpoint(self) -> Path | None:
        last = self.run_dir / LAST
        return last if last.exists() else None

    @property
    def best_weights(self) -> Path | None:
        best = self.run_dir / BEST
        return best if best.exists() else None


def check_launchable(plan: Plan) -> None:
    """Before anything is written: the plan's launcher can start here (launch.unavailable)."""
    placement, ray = plan.job.spec.target.launcher, plan.job.spec.ray
    missing = launch.unavailable(plan.launcher, plan.devices, placement, ray.model_dump() if ray else None)
    if missing:
        raise UserError(f"{'target.launcher' if placement else 'target.devices'}: {missing}")


def ensure_data(plan: Plan) -> None:
    """The dataset the plan names, made when it is not there: generated, or COCO JSON or NDJSON converted once."""
    if plan.data.synth is not None and not plan.data.yaml_path.exists():
        make_synth_data(plan.data.synth.model_dump(), plan.job.spec.task)
    if plan.data.coco is not None:
        from orchestrator.jobspec.coco_convert import convert_recorded

        convert_recorded(plan.data.coco, plan.job.spec.task, plan.data.yaml_path)
    if plan.data.ndjson is not None:
        from orchestrator.jobspec import ndjson_convert

        ndjson_convert.convert(Path(plan.data.ndjson), plan.data.yaml_path)


DATA_YAML = "data.yaml"
DISK_FULL = ("No space left on device", "[Errno 28]", "Disk quota exceeded", "database or disk is full")


def write_data_yaml(plan: Plan, run_dir: Path) -> Path | None:
    """A data.yaml whose `path:` is relative is handed to Ultralytics as a copy in the run dir with the
    root the plan resolved (jobspec/dataset.py): Ultralytics would resolve it against the worker's current
    folder or its own datasets_dir, and a resumed or Slurm-started worker may sit elsewhere. Returns the
    copy (the run's `data`), or None when the plan's data.yaml is used as it is."""
    if plan.data.root is None:
        return None
    from orchestrator.jobspec.loader import read_yaml_file

    cfg = dict(read_yaml_file(plan.data.yaml_path, "dataset yaml"), path=str(plan.data.root))
    write_text_atomic(run_dir / DATA_YAML, dump_yaml(cfg))
    return run_dir / DATA_YAML


def create_run(plan: Plan, runs_dir: Path | None = None, tags: dict | None = None, run_id: str | None = None,
               trial: TrialLink | None = None, callbacks: list[str] | None = None) -> tuple[str, Path]:
    """Everything is validated by now: create the run dir, write the resolved job and add the
    registry row (state queued). `tags` (sweeps: {"study": name, "trial": n}) go into the row;
    `run_id` (a Slurm job's, kept across requeues) replaces a new one; `trial` and `callbacks`: a sweep
    trial's link to its study and the hook that reports to it (ResolvedRun)."""
    check_launchable(plan)
    ensure_data(plan)
    spec = plan.job.spec
    root = Path(runs_dir).expanduser().resolve() if runs_dir else runs_root(spec)
    registry = registry_for_new_run(root, spec.name, run_id)
    mlflow = effective_mlflow(spec, root)  # its store checked before the run dir exists, too
    run_id, run_dir = claim_run_dir(root / spec.name, run_id)
    data_yaml = write_data_yaml(plan, run_dir)
    mode, _ = resolve_mode(spec.wandb)
    resolved = plan.resolved_document(run_id, run_dir, mode, data_yaml)
    resolved.sweep, resolved.callbacks = trial, list(callbacks or [])
    resolved.save(run_dir)
    if mlflow is not None:  # the store decided once: a resume from another shell logs to the same one
        write_json_atomic(run_dir / MLFLOW_RECORD, {"settings": mlflow})
    add_new_run(registry, run_id, job=spec.name, run_dir=run_dir, devices=plan.devices.text, tags=tags,
                epochs=spec.epochs)
    return run_id, run_dir


def registry_for_new_run(root: Path, name: str, run_id: str | None) -> Registry:
    """The registry a new run of job `name` goes into, checked writable before its folder exists (nothing
    half-written). How every run begins, whatever its backend: this, claim_run_dir, its files, add_new_run."""
    if not (root / name).resolve().is_relative_to(root):  # names are sanitised by the spec; belt and braces
        raise UserError(f"name: '{name}' would write outside {root}")
    if run_id and (root / name / run_id).exists():  # a chosen --run-id whose folder another registry knows
        raise UserError(f"--run-id: {root / name / run_id} exists already; pick another id")
    registry = Registry.open(root)
    registry.check_writable()
    return registry


def add_new_run(registry: Registry, run_id: str, **row) -> None:
    """The new run's row, queued, once its folder holds its job.resolved.yaml."""
    with registry:
        registry.reconcile()  # a command that changes state records the runs that vanished since
        registry.add_run(run_id, **row)


def claim_run_dir(job_dir: Path, run_id: str | None) -> tuple[str, Path]:
    """Make the run's folder, which claims its id: of two commands creating one id at the same moment
    (the same --run-id, or new ids within one second that drew the same 4 hex digits) one gets it; the
    other picks a new id, or is told (a chosen id)."""
    for _ in range(5):
        candidate = run_id or new_run_id()
        try:
            (job_dir / candidate).mkdir(parents=True, exist_ok=False)
            return candidate, job_dir / candidate
        except FileExistsError:
            if run_id:
                raise UserError(f"--run-id: run {run_id} was created by another command at the same moment; pick "
                                "another id") from None
    raise UserError(f"runs_dir: could not find a free run id in {job_dir}")


def child_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {
        "PYTHONPATH": f"{PACKAGE_ROOT}{os.pathsep}{path}" if path else str(PACKAGE_ROOT),
        # the worker ends its process group if this orchestrator vanishes (worker/recovery.py)
        ENV_SUPERVISOR_PID: str(os.getpid()),
        ENV_SUPERVISOR_START: process_identity(os.getpid()) or "",
    }


def execute(plan: Plan, run_id: str, run_dir: Path, on_event: Callable[[dict], None] = lambda e: None,
            poll_s: float = 0.5) -> RunOutcome:
    return supervise(run_id, run_dir, launch.backend_of_run(run_dir), plan.job.spec.oom_retries, on_event, poll_s)


def supervise(run_id: str, run_dir: Path, backend: Backend, oom_retries: int = 0,
              on_event: Callable[[dict], None] = lambda e: None, poll_s: float = 0.5) -> RunOutcome:
    """Start attempts on the run's backend, tail its events, keep the registry row current. After a CUDA
    OOM, re-plan with half the per-device batch (same images per step) and restart, up to `oom_retries`;
    after an attempt that ended with epochs left (a Kaggle session or Slurm job at its limit, a Ray node lost:
    re-planned for the nodes left), start the next one (_between_attempts)."""
    refuse_symlinks(run_dir)
    registry = Registry.of_run(run_dir)
    events_path = run_dir / EVENTS
    end_torn_line(events_path)  # a worker killed mid-line: the next attempt's records must not be glued to it
    tail = EventTail(events_path)
    tail.offset = events_path.stat().st_size if events_path.exists() else 0  # earlier attempts: not replayed
    used = len(load_resolved(run_dir).oom_history)
    events: list[dict] = []
    recoveries: list[OomStep] = []
    notes: list[str] = []
    while True:
        state, code, attempt, note = _attempt(backend, run_id, run_dir, registry, tail, on_event, poll_s)
        events += attempt
        oom = next((e for e in attempt if e.get("event") == "oom"), None)
        if note:  # the attempt knows why it ended: a stop, a stall, a Kaggle session's reason
            notes.append(note)
            break
        if state != RunState.KILLED and code == EXIT_NEXT_SESSION:
            stop_code, why = _between_attempts(backend, run_id, run_dir, registry)
            if stop_code is None:
                continue
            code = stop_code
            notes.append(why)
            break
        if state == RunState.KILLED or code == 0 or not (code == EXIT_OOM or oom):
            if code == EXIT_NOT_RESUMABLE:
                notes.append("the worker could not resume from weights/last.pt (see train.log)")
            break
        if used >= oom_retries:
            notes.append(f"CUDA out of memory; no OOM retries left ({used}/{oom_retries} used, job field oom_retries)")
            break
        try:
            step = replan.plan_oom_restart(run_dir, used, oom)
        except UserError as exc:
            notes.append("; ".join(exc.problems))
            break
        used += 1
        recoveries.append(step)
        text = replan.describe_oom_step(step)
        EventWriter(events_path).emit("oom_restart", message=text, **step.to_dict())
        say_in_log(run_dir, text, apart=True)
        registry.update(run_id, oom_retries=used, note=text)  # (the same launcher: each start reads the new plan)
    for event in tail.read_new():
        events.append(event)
        on_event(event)
    summary = None
    if (run_dir / SUMMARY).exists() and state not in (RunState.KILLED, RunState.STALLED):
        import json

        summary = json.loads((run_dir / SUMMARY).read_text())
        state = RunState.FINISHED if code == 0 else RunState.FAILED
        if used and code == 0:  # OOM restarts, of this or an earlier attempt: in the re-written file
            summary["oom_recoveries"] = [s.to_dict() for s in load_resolved(run_dir).oom_history]
            write_json_atomic(run_dir / SUMMARY, summary)
        if state == RunState.FINISHED and summary.get("state") == RunState.FINISHED:
            summary, export_notes = export_finished(run_dir, summary)
            notes += export_notes
    exit_code = {RunState.KILLED: 130, RunState.STALLED: 124}.get(state, code)  # as the CLI exits (cli/common.py)
    if state == RunState.FINISHED and failed_exports(summary):
        exit_code = EXIT_EXPORT_FAILED  # finished, its weights kept: the command's exit code says what failed
    epochs_done = (summary or {}).get("epochs_completed") or completed_epochs(run_dir)
    if state == RunState.FAILED and not notes:
        notes.append(failure_note(run_id, run_dir, code, epochs_done))
    with registry:
        registry.move(run_id, state, ended_at=time.time(), exit_code=exit_code, epochs_done=epochs_done,
                      metrics=(summary or {}).get("metrics"), note="; ".join(notes) or None)
    return RunOutcome(run_id, run_dir, state, exit_code, summary, events, recoveries, "; ".join(notes) or None,
                      epochs=load_resolved(run_dir).plan.epochs, epochs_done=epochs_done)


def close_as_finished(run_dir: Path, recorded: Path, started_at: float | None) -> str:
    """A run whose every epoch was recorded before it stopped (during the final validation of best.pt: a kill, a
    Slurm requeue, a Ray node lost near the end) has nothing left to train: its summary is written as finished
    with the last epoch's validation metrics, an epoch event its kill lost is written from results.csv, a damaged
    weights file is set aside, and its trackers are closed. `recorded`: node 0's run folder (another node's own,
    for a node of a multi-node run). Returns the note that says so; the exports are the caller's."""
    epochs = load_resolved(run_dir).plan.epochs
    if recorded == run_dir:  # a kill between the last epoch's last.pt and its event: the event, from its row
        end_torn_line(run_dir / EVENTS)  # (the kill may have torn a line: the event must not be glued to it)
        for epoch, metrics in missing_epochs(run_dir / EVENTS, epochs):
            EventWriter(run_dir / EVENTS).emit("epoch", epoch=epoch, epochs=epochs, metrics=metrics, recovered=True)
    last = [e for e in EventTail(recorded / EVENTS).read_new() if e.get("event") == "epoch"][-1:]
    metrics = {k: v for k, v in (last[0]["metrics"] if last else {}).items() if k.startswith("metrics/")}
    note = (f"all {epochs} epochs were recorded before it stopped (during the final validation of best.pt): "
            "closed as finished; its metrics are the last epoch's validation")
    damaged = set_aside_damaged_weights(recorded) if recorded == run_dir else None
    summary = run_summary(run_dir, state=RunState.FINISHED, epochs=epochs, epochs_completed=epochs, metrics=metrics,
                          started=started_at or time.time(), note="; ".join(filter(None, [note, damaged])))
    write_json_atomic(run_dir / SUMMARY, summary)
    unclosed = close_trackers(run_dir) if recorded == run_dir else None
    return "; ".join(filter(None, [note, damaged, unclosed]))


CLOSE_TIMEOUT_S = 300  # starting three trackers and logging a run's epochs to each: seconds; a store that hangs


def close_trackers(run_dir: Path) -> str | None:
    """A run closed without training again still closes its trackers as finishing does: W&B and MLflow get the
    epochs the killed attempt trained but never logged and are finished (MLflow's run FINISHED), TensorBoard's
    file is caught up, each tracker's record goes into summary.json (worker/close_run.py, a short process of
    the training side). Returns a note when that process failed (the run is finished all the same)."""
    try:
        done = subprocess.run([sys.executable, "-m", "orchestrator.worker.close_run", str(run_dir)],
                              env={**os.environ, **child_env()}, capture_output=True, text=True,
                              timeout=CLOSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"its trackers were not closed within {CLOSE_TIMEOUT_S} s"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        why = redact_text(lines[-1][:200]) if lines else f"exit {done.returncode}"
        return f"its trackers were not closed ({why})"
    return None



def _between_attempts(backend: Backend, run_id: str, run_dir: Path, registry: Registry) -> tuple[int | None, str]:
    """After an attempt that left epochs to the next (a Kaggle session, a Slurm job, a Ray node lost): (None, "")
    to start it; a run whose every epoch was recorded is closed as finished: (0, the note); a re-plan for the
    nodes a lost one left that cannot be made stops the run: (1, why)."""
    if completed_epochs(run_dir) >= load_resolved(run_dir).plan.epochs:  # stopped in its final validation
        return 0, close_as_finished(run_dir, run_dir, registry.get(run_id).started_at)
    shrunk = getattr(backend, "shrunk_to", None)  # a Ray node lost: the nodes left train on
    if shrunk:
        try:
            text = replan.plan_for_nodes_left(run_dir, shrunk)
        except UserError as exc:
            return 1, "; ".join(exc.problems)
        EventWriter(run_dir / EVENTS).emit("replanned", message=text, devices=shrunk)
        say_in_log(run_dir, text, apart=True)
        registry.update(run_id, devices=shrunk, note=text)
    return None, ""


def export_finished(run_dir: Path, summary: dict) -> tuple[dict, list[str]]:
    """The job's export formats, after a finished training (each in a process of its own: exports.py);
    the summary with their records, and a note for each that failed or scored beyond the tolerance."""
    formats = load_resolved(run_dir).job.export_formats
    if not formats:
        return summary, []

    records = run_exports(run_dir, formats, env=child_env(), say=lambda line: say_in_log(run_dir, line))
    import json

    summary = json.loads((run_dir / SUMMARY).read_text())
    return summary, [describe(r) for r in records.values() if not r.get("ok")]


def failure_note(run_id: str, run_dir: Path, code: int, epochs_done: int) -> str:
    """Why the worker failed, in one line, and how to continue when a checkpoint is there."""
    note = failure_cause(run_dir, code)
    if any(marker in note for marker in DISK_FULL) or disk_full(run_dir):
        note = f"the disk is full ({note}); free space on it, then resume"
    epochs = load_resolved(run_dir).job.epochs
    if (run_dir / LAST).exists():
        note += f"; {epochs_done} of {epochs} epochs done; `yolo-orch resume {run_id}` continues it"
    return note


def disk_full(run_dir: Path) -> bool:
    """Less than 1 MiB free where the run writes: some writers (torch's checkpoint writer) fail on a full
    disk with a message that does not say so."""
    try:
        return shutil.disk_usage(run_dir).free < 1 << 20
    except OSError:
        return False


RUN_FILES = (LOG, EVENTS, SUMMARY, RESOLVED, RESULTS, ENV, DATA_YAML, DEADLINE_STOP, "args.yaml", "trial.json",
             MLFLOW_RECORD)
RUN_FOLDERS = ("weights", HEARTBEATS, STACKS, "wandb", TENSORBOARD, EXPORTS, SLURM_DIR)


# W&B's own links in wandb/ (made by wandb.init before the logger switched them off: worker/wandb_logger.py)
WANDB_LINKS = ("latest-run", "debug.log", "debug-internal.log")


def refuse_symlinks(run_dir: Path) -> None:
    """The files a run writes or appends to must be its own: a train.log, a stacks/ folder or a
    results.csv replaced by a symbolic link would make a resume write wherever it points (a shell
    profile, another run). Checked: the run's files and folders, and what lies in those folders.
    Not refused: W&B's own three links in wandb/ of a run logged by an earlier version, which point
    into wandb/ itself and which nothing writes through any more."""
    paths = [run_dir / name for name in RUN_FILES + RUN_FOLDERS]
    for folder in RUN_FOLDERS:
        if (run_dir / folder).is_dir() and not (run_dir / folder).is_symlink():
            paths += sorted((run_dir / folder).iterdir())[:1000]
    links = [p for p in paths if p.is_symlink() and not _wandb_own_link(run_dir, p)]
    if links:
        raise UserError([f"{p}: a symbolic link in the run directory; refusing to write through it (replace it "
                         "with a regular file or folder)" for p in links])


def _wandb_own_link(run_dir: Path, path: Path) -> bool:
    """One of W&B's links: its name, in wandb/, relative and without `..` (so inside wandb/, whose
    entries are themselves checked for links)."""
    if path.parent != run_dir / "wandb" or path.name not in WANDB_LINKS:
        return False
    target = Path(os.readlink(path))
    return not target.is_absolute() and ".." not in target.parts


def _attempt(backend: Backend, run_id: str, run_dir: Path, registry: Registry, tail: EventTail,
             on_event: Callable[[dict], None], poll_s: float) -> tuple[RunState, int, list[dict], str | None]:
    """One attempt on the run's backend: (state, exit code, its events, a note). state is killed on
    Ctrl-C/SIGTERM, stalled when the watchdog saw no rank advance for the job's stall_timeout."""
    row = registry.get(run_id)
    registry.move(run_id, RunState.RUNNING, pid=os.getpid(), started_at=row.started_at or time.time(),
                  attempts=row.attempts + 1, exit_code=None, ended_at=None)
    timeout = load_resolved(run_dir).job.stall_timeout if backend.watched else 0
    dog = Watchdog(run_dir, timeout) if timeout else None
    events: list[dict] = []
    attempt, state, note, stall, code = None, RunState.FAILED, None, None, None
    try:
        with process.interrupts_raise():  # from the start: a backend may take seconds to start (a Kaggle push)
            attempt = backend.start(run_dir, child_env())
            registry.update(run_id, worker_pid=attempt.pid)
            while code is None and stall is None:
                for event in tail.read_new():
                    events.append(event)
                    on_event(event)
                code = attempt.wait(poll_s)
                if code is None and dog:
                    stall = _watch(dog, run_dir)
    except process.Interrupted as exc:
        code = attempt.stop() if attempt else 130
        state, note = RunState.KILLED, (attempt and attempt.note) or (
            f"stopped by {exc} (Ctrl-C or kill); `yolo-orch resume` continues it")
    else:
        if stall is not None:
            dump_stacks(stall)  # before the stop: every rank as it hung
            state, note = RunState.STALLED, stall.note(run_id, run_dir, timeout)
            EventWriter(run_dir / EVENTS).emit("stalled", rank=stall.rank, epoch=stall.epoch, batch=stall.batch,
                                               phase=stall.phase, idle_s=round(stall.idle_s, 1), message=note)
        code = attempt.stop(grace_s=5 if stall else 0)  # else: reap stray dataloader workers, if any
        note = note or attempt.note
    for event in tail.read_new():
        events.append(event)
        on_event(event)
    return state, code, events, note


def _watch(dog: Watchdog, run_dir: Path) -> Stall | None:
    warning = dog.slow_step_warning()
    if warning:
        EventWriter(run_dir / EVENTS).emit("warning", message=warning)
    return dog.check()
