"""`yolo-orch plan JOB.yaml [--devices SPEC]... [--policy P] [--json]`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import SETS
from orchestrator.cli.common import out, print_json
from orchestrator.scaling.types import POLICIES
from orchestrator.devices import DeviceSpecError, parse_devices
from orchestrator.errors import UserError

# The documented `plan --json` contract: one object per target with exactly these keys (and `ultralytics`:
# the installed release the plan modelled).
PLAN_JSON_KEYS = ("devices", "policy", "passed", "effective", "reasons", "warnings", "details")


def plan_cmd(
    job_file: Path = typer.Argument(..., help="Job spec YAML."),
    devices: Optional[list[str]] = typer.Option(
        None, "--devices", "-d", help="Target device spec; repeat for several columns (e.g. -d 1 -d 4 -d tpu:8)."
    ),
    policy: Optional[str] = typer.Option(None, "--policy", help=f"Scaling policy: {', '.join(POLICIES)}."),
    set_: Optional[list[str]] = SETS,
    json_out: bool = typer.Option(False, "--json", help="Print a JSON array, one object per target."),
    explain: bool = typer.Option(False, "--explain", help="Every effective value and the mechanism behind each reason."),
) -> None:
    """Show how the job's hyperparameters map to each target: passed, effective, why."""
    # Imported here so `yolo-orch --help` does not pay for pydantic models and rich tables.
    from orchestrator.cli.render import scaling_table, why_lines
    from orchestrator.jobspec.job_data import describe_data
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job

    problems = []
    if policy is not None and policy not in POLICIES:
        problems.append(f"--policy: unknown policy '{policy}'; expected one of {', '.join(POLICIES)}")
    wanted = []
    for d in devices or []:
        try:
            wanted.append(parse_devices(d))
        except DeviceSpecError as exc:
            problems.append(f"--devices: {exc}")
    if problems:
        raise UserError(problems)
    job = load_job(job_file, sets=set_ or [])
    targets = wanted or [None]  # None: the job's target.devices
    plans = []
    errors = []
    data = describe_data(job)  # the same for every target: the dataset folder is walked once
    for d in targets:
        try:
            plans.append(make_plan(job, devices=d, policy=policy, data=data))
        except UserError as exc:
            errors += [f"{line} [--devices {d}]" if len(targets) > 1 else line for line in exc.problems]
    if errors:
        raise UserError(errors)
    if json_out:
        print_json([{**{key: p.scaled.as_json()[key] for key in PLAN_JSON_KEYS}, "ultralytics": p.ultralytics}
                    for p in plans])
        return
    from orchestrator.wandb_mode import describe_mode

    out.print(scaling_table([p.scaled for p in plans], title=f"Plan for {job.spec.name}", explain=explain))
    for line in why_lines([p.scaled for p in plans], explain):
        out.print(line, markup=False, highlight=False)
    out.print(describe_mode(job.spec.wandb), markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
