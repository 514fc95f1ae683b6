"""The resume order, written in one place: how a run continues from its own checkpoint in its own run
directory. `yolo-orch resume` (resume.write_resume, after it claimed the row and re-planned) and a
backend's next attempt within one supervision (a Slurm job that its time limit or a preemption ended:
launch/slurm_backend.py) both come through here, as an OOM restart does (plan/replan.py).

    rewind_damaged(...)          a damaged last.pt: fall back to the newest whole checkpoint
    set_aside_unsaved_rows(...)  results.csv rows of epochs whose checkpoint never landed
    write_order(...)             the order and its record, job.resolved.yaml written back (save_resolved: the
                                 stale patched checkpoint removed)"""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator.errors import RunStateError
from orchestrator.rundir.checkpoints import (REWOUND_RESULTS, fallback_checkpoint, inspect_checkpoint,
                                             results_epochs, rewind_results, rewind_to, rewind_to_start)
from orchestrator.rundir.epochs import completed_epochs
from orchestrator.rundir.names import DEADLINE_STOP, LAST, RESUME_PATCHED, SESSION_RESUME, WEIGHTS
from orchestrator.rundir.resolved import ResolvedRun, ResumeOrder, ResumeRecord, load_resolved


def save_resolved(run_dir: Path, resolved: ResolvedRun) -> None:
    """Written back in this version's layout (load_resolved refused a newer one)."""
    resolved.save(run_dir)
    # a stale patched checkpoint from a killed attempt must never be read by a rank of the next one
    (Path(run_dir) / RESUME_PATCHED).unlink(missing_ok=True)


def write_order(run_dir: Path, resolved: ResolvedRun, order: ResumeOrder, from_epoch: int,
                previous_devices: str | None = None, replanned: bool = False) -> None:
    """The order and its record (`resumes`: when, from which epoch, on which devices, re-planned from which)
    into job.resolved.yaml, written back (save_resolved)."""
    devices = resolved.plan.devices
    resolved.resume = order
    resolved.resumes.append(ResumeRecord(time=time.time(), from_epoch=from_epoch, devices=devices,
                                         previous_devices=previous_devices or devices, replanned=replanned))
    save_resolved(run_dir, resolved)


def rewind_damaged(run_id: str, run_dir: Path, weights_dir: Path, restart_ok: bool) -> str | None:
    """A damaged weights/last.pt (cut short, corrupted): the run falls back to its newest whole,
    resumable checkpoint and trains the epochs after it again (rundir/checkpoints.py). Returns the note
    that says so; refuses (what to do) when no checkpoint of the run is whole, except for a requeued
    Slurm job (`restart_ok`), which starts again from epoch 1."""
    last = weights_dir / LAST
    if not last.is_file():
        return None
    found = inspect_checkpoint(last)
    if found.sound:
        return None
    fallback = fallback_checkpoint(weights_dir / WEIGHTS)
    if fallback is None and not restart_ok:
        raise RunStateError(f"RUN: {run_id}: {last} is damaged ({found.damage}) and no other checkpoint of the run "
                            "(best.pt, epoch<N>.pt) is whole and resumable; nothing to resume from: submit the job again")
    if weights_dir != run_dir:  # another node of a multi-node run: node 0's resume rewinds its directory
        return f"{last} is damaged ({found.damage}): node 0's resume falls back to an earlier checkpoint"
    if fallback is None:
        again = rewind_to_start(run_dir, found.damage)
        return f"{LAST} is damaged ({found.damage}) and no other checkpoint is whole: epochs {again} train again"
    again = rewind_to(run_dir, fallback, found.damage)
    where = fallback.path.relative_to(run_dir)
    return (f"{LAST} is damaged ({found.damage}): continued from {where} (epoch {fallback.epochs})"
            + (f"; epoch(s) {', '.join(map(str, again))} train again (their rows: {REWOUND_RESULTS})" if again else ""))


def set_aside_unsaved_rows(run_dir: Path, done: int) -> list[int]:
    """results.csv holds each epoch once: the row of an epoch whose checkpoint never landed (a kill
    between Ultralytics' row and its last.pt) moves to results.rewound.csv, since the resume trains that
    epoch again and appends its row. Returns those epochs."""
    unsaved = sorted({e for e in results_epochs(run_dir) if e > done})
    if unsaved:
        rewind_results(run_dir, done)
        if (run_dir / LAST).is_file():  # newer than the rewritten results.csv, as after a save: its last row counts
            os.utime(run_dir / LAST)
    return unsaved


def unsaved_note(unsaved: list[int]) -> str:
    return (f"epoch(s) {', '.join(map(str, unsaved))} ended without a checkpoint and train again (their "
            f"results.csv rows: {REWOUND_RESULTS})")


def order_next_attempt(run_id: str, run_dir: Path, reason: str, previous_devices: str | None = None) -> str:
    """The run's next attempt continues from its last whole checkpoint (a training its deadline stopped: the
    resumable copy it kept, since the final validation strips last.pt), or starts again from epoch 1 when it
    has none (an attempt lost before its first epoch ended). `previous_devices`: the last attempt's, when the
    run was re-planned since (a Ray node lost). Returns the note."""
    run_dir = Path(run_dir)
    resolved = load_resolved(run_dir)
    paused = (run_dir / DEADLINE_STOP).is_file() and (run_dir / SESSION_RESUME).is_file()
    rewound = None if paused else rewind_damaged(run_id, run_dir, run_dir, restart_ok=True)
    done, epochs = completed_epochs(run_dir), resolved.plan.epochs
    unsaved = set_aside_unsaved_rows(run_dir, done)
    write_order(run_dir, resolved, ResumeOrder(str(SESSION_RESUME if paused else LAST), "scratch", reason), done + 1,
                previous_devices, replanned=previous_devices is not None)
    return "; ".join([f"{reason}: the next attempt continues from epoch {done + 1}/{epochs}",
                      *filter(None, [rewound, unsaved and unsaved_note(unsaved)])])
