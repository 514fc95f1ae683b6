"""Resume, in one place: continue a killed, failed or stalled run in its own run directory and
registry row, as `yolo-orch resume`, `submit --resume-existing` and a requeued Slurm job do.

    close_recorded_run(row)   a run that recorded every epoch before it stopped is closed as finished
    prepare(row, devices)     claim the row (compare-and-set), check the run can continue, re-plan it
                              for other devices (plan/replan.py), make again what can be made again (a
                              generated dataset), write the resume order into job.resolved.yaml
    run(row, prepared)        hand it to the runner, which supervises the training process

Refusals are UserErrors (RunStateError: the run's state) that say what to do, raised before anything is
claimed or written."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator import launch
from orchestrator.launch import slurm_backend
from orchestrator import plan as planmod
from orchestrator.data.cache import make_synth_data
from orchestrator.devices import DeviceSpec, DeviceSpecError, parse_devices
from orchestrator.errors import EXIT_EXPORT_FAILED, RunStateError, UserError
from orchestrator.exports import failed_exports
from orchestrator.registry import ACTIVE, RESUMABLE, Registry, Run, RunState
from orchestrator.plan.recheck import recheck
from orchestrator.plan.replan import replan
from orchestrator.rundir import (LAST, RESOLVED, SUMMARY, NodeOptions, ResolvedRun, ResolvedRunError, ResumeOrder,
                                 RunPlan, completed_epochs, load_own_yaml, load_resolved, process_alive)
from orchestrator.rundir.resume_order import rewind_damaged, set_aside_unsaved_rows, unsaved_note, write_order
from orchestrator.runner import RunOutcome, close_as_finished, export_finished, refuse_symlinks, supervise


@dataclass
class PreparedResume:
    """A resume written into the run directory, ready for the runner."""

    resolved: ResolvedRun
    from_epoch: int
    replanned: bool
    note: str

    @property
    def plan(self) -> RunPlan:
        return self.resolved.plan


def close_recorded_run(row: Run) -> RunOutcome | None:
    """A run killed or failed after its last epoch ended (during the final validation: a Slurm
    requeue near the end) has nothing left to train: close it as finished with the last epoch's
    validation metrics (runner.close_as_finished), then its exports. None when the row is not such a run."""
    run_dir = Path(row.run_dir or "")
    if row.state not in RESUMABLE or not (run_dir / RESOLVED).is_file():
        return None
    resolved = read_run(row.id, run_dir)
    epochs = resolved.plan.epochs
    recorded = node0_run_dir(run_dir, resolved)  # node 0's, for another node of a multi-node run
    if completed_epochs(recorded) < epochs:
        return None
    recheck_run(row.id, run_dir, resolved, launching=False)  # what closing runs is held to `plan`'s checks
    note = close_as_finished(run_dir, recorded, row.started_at)
    summary, exit_code = json.loads((run_dir / SUMMARY).read_text()), 0
    if recorded == run_dir:  # closed as finishing closes a run: its trackers (above), then its exports
        summary, export_notes = export_finished(run_dir, summary)
        note = "; ".join([note, *export_notes])
        exit_code = EXIT_EXPORT_FAILED if failed_exports(summary) else 0
    with Registry.of_run(run_dir) as registry:
        if not registry.move(row.id, RunState.FINISHED, expect=row.state, ended_at=time.time(),
                             exit_code=exit_code, epochs_done=epochs, metrics=summary.get("metrics"), note=note):
            raise RunStateError(f"RUN: {row.id} changed state while it was being closed (a resume elsewhere?)")
    return RunOutcome(row.id, run_dir, RunState.FINISHED, exit_code, summary, note=note)


def prepare(row: Run, devices: str | None = None, restart_ok: bool = False,
            launch_opts: dict | None = None) -> PreparedResume:
    """Claim the row (killed/failed -> queued, compare-and-set) and write the resume order. Raises
    UserError with the fix when the run cannot be resumed (the row is then as it was). `restart_ok` (a
    requeued Slurm job): a run stopped before its first checkpoint starts again from epoch 1 in the
    same run directory. `launch_opts`: this node's rank and rendezvous now (a requeued multi-node job's
    new allocation)."""
    wanted = devices_flag(devices)  # parsed once here, and carried as the spec from here on
    run_dir = Path(row.run_dir or "")
    if row.run_dir:
        refuse_symlinks(run_dir)  # before the row is claimed: a refusal changes nothing
    registry = Registry.of_run(run_dir) if row.run_dir else None
    if registry is None or row.state not in RESUMABLE:
        return write_resume(row, wanted, restart_ok, launch_opts)  # raises the right message
    if (run_dir / RESOLVED).is_file():
        check_before_claim(row, run_dir, restart_ok)
    with registry:
        if not registry.move(row.id, RunState.QUEUED, expect=row.state, pid=os.getpid()):
            raise RunStateError(f"RUN: {row.id} changed state while preparing the resume (another resume?)")
        try:
            info = write_resume(row, wanted, restart_ok, launch_opts)
        except BaseException:
            registry.move(row.id, row.state, expect=RunState.QUEUED, pid=row.pid)  # handed back
            raise
        registry.update(row.id, devices=info.plan.devices, note=info.note)
    return info


def devices_flag(devices: str | None) -> DeviceSpec | None:
    """`--devices` as a device spec (None: the run's own devices); a text that is none is the flag's error."""
    try:
        return parse_devices(devices) if devices else None
    except DeviceSpecError as exc:
        raise exc.under("--devices") from None


def check_before_claim(row: Run, run_dir: Path, restart_ok: bool) -> None:
    """What refuses a resume, in the order a user fixes it, before the row is claimed (after a --devices that
    is no device spec): a run that stopped before its first checkpoint (nothing to resume), then
    job.resolved.yaml held to what `plan` accepts (read_run's re-check)."""
    resolved = read_run(row.id, run_dir)
    refuse_without_checkpoint(row.id, node0_run_dir(run_dir, resolved), restart_ok)
    recheck_run(row.id, run_dir, resolved)
    job = slurm_backend.active_job(run_dir) if resolved.job.placement == "slurm" else None
    if job:  # its runner was killed (kill -9, a lost login node): the job it submitted trains on
        raise RunStateError(f"RUN: {row.id}: its Slurm job {job} still runs (its runner is gone); `scancel {job}` "
                            "first, then resume")


def refuse_without_checkpoint(run_id: str, weights_dir: Path, restart_ok: bool) -> None:
    if not (weights_dir / LAST).is_file() and not restart_ok:
        raise RunStateError(f"RUN: {run_id} stopped before its first epoch ended ({weights_dir / LAST} does not exist); "
                            "nothing to resume: submit the job again")


def run(row: Run, prepared: PreparedResume, on_event: Callable[[dict], None] = lambda e: None,
        poll_s: float = 0.5) -> RunOutcome:
    """Continue the prepared run from its checkpoint in the same run dir and registry row."""
    resolved = prepared.resolved
    return supervise(row.id, Path(row.run_dir), launch.backend_of_run(Path(row.run_dir)), resolved.job.oom_retries,
                     on_event, poll_s)


def node0_run_dir(run_dir: Path, resolved: ResolvedRun) -> Path:
    """Where a run's checkpoints are: its own directory, or for node K > 0 of a multi-node run started
    with `--run-id BASE` (run ids BASE-node0, BASE-node1, ...) node 0's, its sibling on the shared
    filesystem (only global rank 0 writes weights)."""
    suffix = f"-node{resolved.plan.node_rank}"
    if resolved.plan.node_rank == 0 or not run_dir.name.endswith(suffix):
        return run_dir
    return run_dir.with_name(run_dir.name[: -len(suffix)] + "-node0")


def read_run(run_id: str, run_dir: Path) -> ResolvedRun:
    """The run's job.resolved.yaml for a command that continues it: a newer layout or a damaged file
    is refused, one line."""
    try:
        return load_resolved(run_dir)
    except ResolvedRunError as exc:
        raise exc.under(f"RUN: {run_id}") from None


def recheck_run(run_id: str, run_dir: Path, resolved: ResolvedRun, launching: bool = True) -> None:
    """The read run's content held to what `plan` checks in a job and a plan (plan/recheck.py): a hand edit that
    names another run or an invalid value is refused, and with `launching` devices this machine lacks."""
    try:
        recheck(resolved, run_id, run_dir, launching)
    except UserError as exc:
        raise RunStateError([f"RUN: {run_id}: {RESOLVED}: {line}" for line in exc.problems]) from None


ORPHAN_WAIT_S = 30.0  # a training process whose orchestrator is gone ends itself within a second or two
# (worker/recovery.watch_supervisor); torchrun's ranks, in sessions of their own, can take longer to wind down


def settle_orphans(row: Run) -> Run:
    """A run whose orchestrator is gone (kill -9 of its process group, a crash) while its training process
    still winds down, as a script that kills and resumes (a scheduler) meets it: wait up to ORPHAN_WAIT_S for
    the training process to end, stop what is left of it, record the run's outcome, and return the row as
    it is now (killed, resumable). A run whose orchestrator lives, or of another host, is returned as it is."""
    if row.state not in ACTIVE or not row.run_dir:
        return row
    if row.host not in (None, socket.gethostname()) or process_alive(row.pid, row.pid_start):
        return row
    worker, identity = row.worker_pid, row.worker_start
    if worker and not wait_until(lambda: not process_alive(worker, identity), ORPHAN_WAIT_S):
        stop_orphan(worker, identity)
    with Registry.of_run(Path(row.run_dir)) as registry:
        registry.reconcile()
        return registry.get(row.id) or row


def wait_until(done: Callable[[], bool], timeout_s: float, poll_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def stop_orphan(pid: int, identity: str | None) -> None:
    """The training process group of a run whose orchestrator is gone, and the ranks outside it (torchrun
    starts each in a session of its own): SIGTERM, then SIGKILL what is left after 10 s."""
    from orchestrator.launch.process import descendants

    strays = descendants(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process_alive(pid, identity):
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for p in strays:
            try:
                p.send_signal(sig)  # psutil checks the process identity (PID reuse) first
            except Exception:  # noqa: BLE001 - gone already
                pass
        if sig == signal.SIGTERM:
            wait_until(lambda: not process_alive(pid, identity) and not any(p.is_running() for p in strays), 10)


def refuse_state(row: Run) -> None:
    """A run that is running, queued or finished has nothing to resume: said with what to do, naming the
    process that still runs (never a dead one: settle_orphans recorded a run whose orchestrator is gone)."""
    run_id = row.id
    if row.state in ACTIVE:
        alive = [f"{what} {pid}" for what, pid, start in (("pid", row.pid, row.pid_start),
                                                          ("training pid", row.worker_pid, row.worker_start))
                 if pid and process_alive(pid, start)]
        where = ", ".join(alive) if alive else f"on {row.get('host')}"
        raise RunStateError(f"RUN: {run_id} is still {row.state} ({where}); "
                            "stop it first (Ctrl-C in its terminal, or kill its process)")
    if row.state == RunState.FINISHED:
        raise RunStateError(f"RUN: {run_id} finished all its epochs; nothing to resume (submit the job again "
                        "to train longer)")


def write_resume(row: Run, devices: DeviceSpec | None = None, restart_ok: bool = False,
                 launch_opts: dict | None = None) -> PreparedResume:
    """Check the row's run can continue, re-plan it for `devices` when they differ, make again what it
    needs, and write the resume order (`prepare`'s work once the row is claimed)."""
    refuse_state(row)
    run_id, run_dir = row.id, Path(row.run_dir or "")
    if not (run_dir / RESOLVED).is_file():
        raise RunStateError(f"RUN: {run_id}: run directory {run_dir} is missing or has no {RESOLVED}")
    resolved = read_run(run_id, run_dir)
    if launch_opts:
        resolved.plan.launch = NodeOptions.from_dict(launch_opts)
    weights_dir = node0_run_dir(run_dir, resolved)
    refuse_without_checkpoint(run_id, weights_dir, restart_ok)
    old_devices = resolved.plan.devices
    replanned = move_to(resolved, devices)
    rewound = rewind_damaged(run_id, run_dir, weights_dir, restart_ok)
    done, epochs = completed_epochs(weights_dir), resolved.plan.epochs
    if done >= epochs:
        raise RunStateError(f"RUN: {run_id} already recorded {done}/{epochs} epochs; nothing to resume")
    restored = restore_data(resolved, run_id)
    unsaved = set_aside_unsaved_rows(run_dir, done) if weights_dir == run_dir else []
    checkpoint = LAST if weights_dir == run_dir else weights_dir / LAST  # (absolute: node 0's)
    order = ResumeOrder(str(checkpoint), if_missing="scratch" if restart_ok else "fail", reason="resume")
    write_order(run_dir, resolved, order, done + 1, previous_devices=old_devices, replanned=replanned)
    p = resolved.plan
    note = (f"resume from epoch {done + 1}/{epochs} on {p.devices}" if (weights_dir / LAST).is_file()
            else f"start again from epoch 1/{epochs} (it stopped before its first checkpoint)")
    if rewound:
        note += f"; {rewound}"
    if unsaved:
        note += f"; {unsaved_note(unsaved)}"
    if restored:
        note += f"; {restored}"
    if replanned:
        note += (f" (re-planned from {old_devices}: batch {p.batch}, nbs {p.nbs}, {p.images_per_step} images per "
                 "optimizer step)")
    return PreparedResume(resolved, done + 1, replanned, note)


def move_to(resolved: ResolvedRun, devices: DeviceSpec | None) -> bool:
    """Re-plan the run for `devices` when they differ from its own (checked launchable here); True when
    it was re-planned. On its own devices the installed release is checked as the plan checks it (it
    may have changed since the run started)."""
    try:
        wanted = devices or parse_devices(resolved.plan.devices)
    except DeviceSpecError as exc:
        raise exc.under(f"plan.devices in {RESOLVED}") from None
    if wanted.text == resolved.plan.devices:
        args = resolved.plan.train_args
        planmod.checked_release(args.get("optimizer"), wanted, resolved.job.task, str(args.get("model") or ""))
        return False
    new = replan(resolved, devices=wanted)
    missing = launch.unavailable(new.launcher, wanted, resolved.job.placement, resolved.job.ray)
    if missing:
        raise UserError(f"--devices: {missing}")
    resolved.plan = new
    return True


def restore_data(resolved: ResolvedRun, run_id: str) -> str | None:
    """Before anything starts: what the run trains on, made again where it can be. A generated dataset
    whose cache was cleaned, or that was generated on another node, is generated again here (the same
    config and seed give the same images) and the plan points at it; a COCO dataset's converted copy is
    converted again from the same files; a dataset the job names that is gone is named at once. Returns a
    note when something was made again."""
    data = Path(resolved.plan.data_path)
    synth = resolved.job.synth
    if synth is not None:
        if data.exists():
            return None
        from orchestrator.jobspec.job import SynthData

        made = make_synth_data(SynthData.model_validate(synth).model_dump(), resolved.job.task)
        resolved.plan.train_args["data"] = str(made)
        return f"its generated dataset ({data}) was missing here: generated again as {made}"
    coco = resolved.plan.data.get("coco")
    if coco and not data.exists():  # the same annotation files give the same copy; changed ones are refused
        from orchestrator.jobspec.coco_convert import convert_recorded

        convert_recorded(coco, resolved.job.task, data)
        return f"its converted COCO copy ({data.parent}) was missing here: converted again"
    ndjson = resolved.plan.data.get("ndjson")
    if ndjson and not data.exists():  # the same file gives the same copy; a changed one is refused
        from orchestrator.jobspec import ndjson_convert

        ndjson_convert.convert(Path(ndjson), data)
        return f"its converted NDJSON copy ({data.parent}) was missing here: converted again"
    missing = _missing_data(data)
    if missing:
        raise UserError(f"RUN: {run_id} trains on {missing}, which does not exist here; put the dataset back "
                        "(or mount it at that path) and resume again")
    return None


def _missing_data(data: Path) -> Path | None:
    """The first missing piece of a dataset: its data.yaml (or folder), or the root a run's data.yaml
    copy points to (runner.write_data_yaml)."""
    if not data.exists():
        return data
    if data.is_file():
        try:
            loaded = load_own_yaml(data.read_text())
            root = loaded.get("path") if isinstance(loaded, dict) else None
        except Exception:  # noqa: BLE001 - an unreadable copy: the worker says what is wrong with it
            return None
        if root and Path(str(root)).is_absolute() and not Path(str(root)).exists():
            return Path(str(root))
    return None
