"""What `plan` and `data synth` do, without a terminal: the job planned for each target asked for (its data
described once for all of them), and a generated dataset written. The commands render what these return."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.devices import DeviceSpecError, parse_devices
from orchestrator.errors import UserError
from orchestrator.scaling.types import POLICIES


@dataclass(frozen=True)
class Planned:
    """`plan`: the loaded job and one Plan per target (the job's own target when none was asked for)."""

    job: object  # jobspec.loader.LoadedJob
    plans: list  # [plan.Plan]


def plan_targets(job_file: Path, devices: list[str], policy: str | None, sets: list[str]) -> Planned:
    """Every target's plan, or one UserError with every problem: the flags' first, then each target's lines
    (tagged `[--devices D]` when there are several)."""
    from orchestrator.jobspec.job_data import describe_data
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    problems = [] if policy is None or policy in POLICIES else [
        f"--policy: unknown policy '{policy}'; expected one of {', '.join(POLICIES)}"]
    wanted = []
    for d in devices:
        try:
            wanted.append(parse_devices(d))
        except DeviceSpecError as exc:
            problems += exc.under("--devices").problems
    if problems:
        raise UserError(problems)
    job = load_job(job_file, sets=sets)
    targets = wanted or [None]  # None: the job's target.devices
    data = describe_data(job)  # the same for every target: the dataset folder is walked once
    plans, errors = [], []
    for d in targets:
        try:
            plans.append(make_plan(job, devices=d, policy=policy, data=data))
        except UserError as exc:
            errors += [f"{line} [--devices {d}]" if len(targets) > 1 else line for line in exc.problems]
    if errors:
        raise UserError(errors)
    return Planned(job, plans)


def synth_dataset(out_dir: Path, images: int, val_images: int, classes: int, imgsz: int, seed: int,
                  task: str) -> Path:
    """`data synth`: the generated dataset's data.yaml (classify: its folder); bad settings and an unwritable
    place are the user's, one line each naming the flag."""
    from orchestrator.data.synth import generate_dataset

    try:
        return generate_dataset(out_dir, images=images, val_images=val_images, classes=classes, imgsz=imgsz,
                                seed=seed, task=task)
    except ValueError as exc:
        raise UserError([f"--{line.replace('_', '-')}" for line in str(exc).splitlines()]) from None
    except FileExistsError as exc:
        raise UserError(f"--out: {exc}") from None
    except OSError as exc:  # /proc/x, a read-only or full file system: nothing is left half-written there
        raise UserError(f"--out: cannot write a dataset at {out_dir}: {exc.strerror or exc}") from None
