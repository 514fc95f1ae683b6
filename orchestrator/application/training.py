"""What `submit`, `train` and `resume` do, without a terminal: plan the job (or find the run it
continues), create and train the run, or resume one. The commands (orchestrator/cli/) parse their
arguments, call one function here and render what it returns; the progress of a training reaches them
through the `progress` they pass (cli/render.training_progress)."""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.errors import RunStateError, UserError
from orchestrator.launch.torchrun import NodeLaunch
from orchestrator.plan import Plan
from orchestrator.registry import Run, RunState
from orchestrator.resume import PreparedResume
from orchestrator.runner import RunOutcome


@dataclass(frozen=True)
class RunStart:
    """A training about to start: `verb` ("run", "resuming") and `name` (JOB/ID) head its line."""

    verb: str
    name: str
    detail: str  # the rest of the line: devices or why it resumes, and the run directory
    epochs: int
    done: int  # epochs already trained (a resume)


# progress(start) -> a context whose value receives each event of the run (events.jsonl)
Progress = Callable[[RunStart], AbstractContextManager[Callable[[dict], None]]]


@dataclass
class Resumed:
    """The end of a resume: the run's outcome and how it was resumed (None: it had recorded every epoch
    and was closed as finished without training)."""

    row: Run
    outcome: RunOutcome
    prepared: PreparedResume | None


@dataclass
class Submitted:
    """The end of a submit or train: a plan only (a dry run), a trained run, or a resume of an existing
    run (`--run-id ID --resume-existing`; `already_finished`: it had, nothing was done)."""

    plan: Plan | None = None
    outcome: RunOutcome | None = None
    resumed: Resumed | None = None
    already_finished: Run | None = None


@dataclass(frozen=True)
class SubmitRequest:
    """`submit`'s options beyond the job: dry run, this node's torchrun options, the run's id."""

    dry_run: bool = False
    node: NodeLaunch = NodeLaunch()
    run_id: str | None = None
    resume_existing: bool = False
    devices: str | None = None  # --devices, for a resumed run's re-plan


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_run_id(run_id: str | None, resume_existing: bool) -> None:
    if resume_existing and not run_id:
        raise UserError("--resume-existing: needs --run-id (the run to resume when it exists)")
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        raise UserError(f"--run-id: '{run_id}' is not a run id (letters, digits, '.', '_', '-'; at most 100)")


def submit(job, request: SubmitRequest, progress: Progress,
           on_planned: Callable[[Plan], None] = lambda plan: None) -> Submitted:
    """Plan a loaded job and train it (a dry run: plan only), or continue the run `request.run_id`
    names when it exists and `resume_existing` says so. `on_planned(plan)` runs once the plan is whole
    and, unless dry, can start here (train's --save)."""
    check_run_id(request.run_id, request.resume_existing)
    run_id = request.run_id
    if run_id and request.node.node_rank is not None:  # one run per node; node 0's holds the weights
        run_id = f"{run_id}-node{request.node.node_rank}"
    if run_id and not request.dry_run:
        row = existing_run(job.spec.runs_dir, run_id, request.resume_existing, job.spec.name)
        if row is not None and row.state == RunState.FINISHED:
            return Submitted(already_finished=row)
        if row is not None:
            launch_opts = resumed_node_options(job, request.node)
            return Submitted(resumed=resume_run(row, request.devices, progress, restart_ok=True,
                                                launch_opts=launch_opts))
    plan = plan_job(job, request.node, request.dry_run)
    on_planned(plan)
    if request.dry_run:
        return Submitted(plan=plan)
    return Submitted(plan=plan, outcome=train_plan(plan, run_id, progress))


def resumed_node_options(job, node: NodeLaunch) -> dict | None:
    """This node's rank and rendezvous for a resumed multi-node run (a new allocation: a new node 0);
    None when none were given (the run keeps its own)."""
    if node.node_rank is None and node.rdzv_endpoint is None:
        return None
    return node.options(job.spec.target.devices) or None


def plan_job(job, node: NodeLaunch, dry_run: bool) -> Plan:
    """The job's plan; unless dry, checked that it can start here (GPUs this machine lacks, a missing
    package) before anything is written."""
    from dataclasses import replace

    from orchestrator.plan import make_plan
    from orchestrator.runner import check_launchable

    plan = make_plan(job, node=replace(node, require=not dry_run))
    if not dry_run:
        check_launchable(plan)
    return plan


def train_plan(plan: Plan, run_id: str | None, progress: Progress) -> RunOutcome:
    from orchestrator.runner import create_run, execute

    run_id, run_dir = create_run(plan, run_id=run_id)
    name = plan.job.spec.name
    with progress(RunStart("run", f"{name}/{run_id}", f" on {plan.devices.text} -> {run_dir}",
                           plan.job.spec.epochs, 0)) as on_event:
        return execute(plan, run_id, run_dir, on_event=on_event)


def resume_run(row: Run, devices: str | None, progress: Progress, restart_ok: bool = False,
               launch_opts: dict | None = None) -> Resumed:
    """Continue the registry row's run (resume.py); a run that recorded every epoch is closed as
    finished. `restart_ok` (a requeued Slurm job): a run stopped before its first checkpoint starts
    again."""
    from orchestrator import resume

    row = resume.settle_orphans(row)  # killed a moment ago: its training process winds down first
    closed = resume.close_recorded_run(row)
    if closed is not None:
        return Resumed(row, closed, None)
    prepared = resume.prepare(row, devices, restart_ok, launch_opts)
    start = RunStart("resuming", row.label, f": {prepared.note} -> {row.run_dir}",
                     prepared.plan.epochs, prepared.from_epoch - 1)
    with progress(start) as on_event:
        return Resumed(row, resume.run(row, prepared, on_event=on_event), prepared)


def resume_named(runs_dir: Path, registry: Path | None, ref: str, devices: str | None, progress: Progress) -> Resumed:
    """`resume RUN`: the run `ref` names in the registry (a run that vanished recorded killed first: resume
    changes state), continued by resume_run."""
    from orchestrator.application.runs import existing_registry

    with existing_registry(runs_dir, registry) as reg:
        reg.reconcile()
        row = reg.resolve(ref)
    return resume_run(row, devices, progress)


def existing_run(runs_dir: Path, run_id: str, resume_existing: bool, job_name: str) -> Run | None:
    """The registry row of `run_id`, or None when there is none; a row without --resume-existing, or
    of another job, is an error."""
    from orchestrator.registry import Registry, registry_path

    if not registry_path(runs_dir).is_file():
        return None
    with Registry.open(runs_dir) as reg:
        reg.reconcile()  # a requeued job's run vanished with its node: recorded before it is claimed
        row = reg.get(run_id)
    if row is not None and row.job != job_name:
        raise UserError(f"--run-id: run {run_id} is a run of job '{row.job}', not '{job_name}'; pick another id")
    if row is not None and not resume_existing:
        then = ("pick another id" if row.state == RunState.FINISHED else
                f"it is still going: `yolo-orch logs {run_id} --follow` shows it" if row.active
                else f"`yolo-orch resume {run_id}` continues it")
        raise RunStateError(f"--run-id: run {run_id} exists ({row.state}); {then}")
    return row
