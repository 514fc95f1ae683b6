"""A run's job.resolved.yaml held to what `plan` accepts, before a command trains it again or closes it
(`resume`, a requeued Slurm job, closing a run that recorded every epoch). The file lives in a run folder,
which may sit on shared storage and be edited by hand: the contract (rundir/contract.py) checks its layout
and the hooks it may name; this checks its content as a job file and a plan are checked. The job section
goes through the job spec and the loader's checks (its task against its model, its overrides, the
packages its trackers and exports need); the plan section through the plan's own (Ultralytics' argument
check, the hyperparameters' ranges and spellings, the device argument and launcher the plan derives from
its devices, what this machine can launch). Every problem is one line naming the field, raised before
anything is claimed or written. Pure: no torch, no ultralytics import."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator import launch
from orchestrator.devices import DeviceSpecError, parse_devices
from orchestrator.errors import UserError
from orchestrator.jobspec import ultralytics_cfg
from orchestrator.jobspec.errors import format_pydantic_errors
from orchestrator.jobspec.job import Hyperparameters, JobSpec
from orchestrator.jobspec.loader import LoadedJob, check_model, check_overrides
from orchestrator.rundir import ResolvedRun
from orchestrator.tracking import check_trackers

# train_args the plan copies from the job as they are (plan.base_train_args): an edit of one side is a lie
FROM_THE_JOB = ("epochs", "imgsz", "seed", "deterministic")


def recheck(resolved: ResolvedRun, run_id: str, run_dir: Path, launching: bool = True) -> None:
    """Raise UserError (one line per problem, each naming the field of job.resolved.yaml) when the run's
    resolved job is not one `plan` would have made for this run, and with `launching` (it is about to
    train here) on this machine."""
    problems = identity_problems(resolved, run_id, run_dir)
    spec, found = job_problems(resolved, run_dir)
    problems += found
    problems += plan_problems(resolved, spec, launching)
    if problems:
        raise UserError(problems)


def identity_problems(resolved: ResolvedRun, run_id: str, run_dir: Path) -> list[str]:
    """The file names this run and this folder (a copy from another run, or an edit, would not)."""
    problems = []
    if resolved.run_id and resolved.run_id != run_id:
        problems.append(f"run_id: {resolved.run_id!r} is not this run's id ({run_id}); the file was edited or copied "
                        "from another run")
    if resolved.run_dir and Path(resolved.run_dir).resolve() != Path(run_dir).resolve():
        problems.append(f"run_dir: {resolved.run_dir!r} is not this run's folder ({run_dir}); the file was edited, or "
                        "the folder moved: write its path there")
    return problems


def job_problems(resolved: ResolvedRun, run_dir: Path) -> tuple[JobSpec | None, list[str]]:
    """The job section as a job file is checked (loader.load_job_dict, without the data walk: a resume
    checks its data itself), and its name against the plan's."""
    try:
        spec = JobSpec.model_validate(resolved.job.document)
    except ValidationError as exc:
        return None, format_pydantic_errors(exc, prefix="job")
    base = Path(resolved.job_file).parent if resolved.job_file else Path(run_dir)
    job = LoadedJob(spec=spec, path=None, base_dir=base)
    problems = [f"job.{line}" for line in check_model(job) + check_overrides(spec.overrides)]
    try:
        check_trackers(spec)
    except UserError as exc:
        problems += [f"job.{line}" for line in exc.problems]
    if resolved.plan.job and resolved.plan.job != spec.name:
        problems.append(f"job.name: {spec.name!r} disagrees with plan.job {resolved.plan.job!r} (the file was edited)")
    return spec, problems


def plan_problems(resolved: ResolvedRun, spec: JobSpec | None, launching: bool = True) -> list[str]:
    """The plan section by the plan's own checks: each argument as Ultralytics checks it, the
    hyperparameters' ranges, what the plan copies from the job, and the devices it trains on."""
    plan = resolved.plan
    args = plan.train_args
    known = ultralytics_cfg.default_cfg()
    problems = [f"plan.train_args.{key}: not an Ultralytics train argument" for key in args if key not in known]
    problems += [f"plan.train_args.{key}: {why}" for key, value in args.items()  # the hyperparameters: as `hyp:` is
                 if key in known and key not in Hyperparameters.model_fields  # checked, below
                 for why in [ultralytics_cfg.check_train_arg(key, value)] if why]
    problems += hyp_problems(args, "plan.train_args") + hyp_problems(plan.hyp, "plan.hyp")
    if spec is not None:
        job = spec.model_dump(mode="json")
        problems += [f"plan.train_args.{key}: {args[key]!r} disagrees with job.{key} {job[key]!r} (the file was edited)"
                     for key in FROM_THE_JOB if key in args and key != "epochs" and args[key] != job[key]]
    return problems + device_problems(plan.devices, plan.launcher, plan.world_size, args.get("device"), launching,
                                      resolved.job.placement, resolved.job.ray)


def hyp_problems(values: dict[str, Any], where: str) -> list[str]:
    """The hyperparameters among `values` as a job's `hyp:` takes them (ranges, the optimizer's spelling)."""
    hyp = {k: v for k, v in values.items() if k in Hyperparameters.model_fields}
    try:
        Hyperparameters.model_validate(hyp)
    except ValidationError as exc:
        return format_pydantic_errors(exc, prefix=where)
    return []


def device_problems(devices: str, launcher: str, world_size: int, device_arg: Any, launching: bool = True,
                    placement: str | None = None, placed: dict | None = None) -> list[str]:
    """The device argument, launcher and world size the plan derives from its devices, and with `launching`
    whether this machine can start them (launch.unavailable: GPUs it lacks, a missing torch_xla; Slurm's
    commands, or Ray and its cluster (`placed`: the job's `ray:`), for a run placed there)."""
    try:
        spec = parse_devices(devices)
    except DeviceSpecError as exc:
        return [f"plan.devices: {line}" for line in exc.problems]
    problems = []
    if device_arg != spec.ultralytics_device():
        problems.append(f"plan.train_args.device: {device_arg!r} is not what plan.devices {devices!r} trains on "
                        f"({spec.ultralytics_device()!r})")
    if launcher != spec.backend:
        problems.append(f"plan.launcher: {launcher!r} is not how {devices!r} is launched ({spec.backend!r})")
    if world_size != spec.world_size:
        problems.append(f"plan.world_size: {world_size} is not {devices!r}'s ({spec.world_size})")
    missing = launch.unavailable(spec.backend, spec, placement, placed) if launching else None
    if missing:
        problems.append(f"plan.devices: {missing}")
    return problems
