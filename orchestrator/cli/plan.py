"""`yolo-orch plan JOB.yaml [--devices SPEC]... [--policy P] [--json]`"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import SETS
from orchestrator.cli.common import out, print_json
from orchestrator.scaling.types import POLICIES

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
    from orchestrator.application.planning import plan_targets  # not at import: `--help` stays light
    from orchestrator.cli.render import job_warning_lines, scaling_table, why_lines

    planned = plan_targets(job_file, devices or [], policy, set_ or [])
    job, plans = planned.job, planned.plans
    if json_out:
        print_json([{**{key: p.scaled.as_json()[key] for key in PLAN_JSON_KEYS}, "ultralytics": p.ultralytics,
                     "warnings": p.scaled.warnings + p.job_warnings} for p in plans])
        return
    from orchestrator.tracking import describe, runs_root
    from orchestrator.wandb_mode import describe_mode

    out.print(scaling_table([p.scaled for p in plans], title=f"Plan for {job.spec.name}", explain=explain))
    for line in why_lines([p.scaled for p in plans], explain) + job_warning_lines(plans[0]):
        out.print(line, markup=False, highlight=False)
    for line in [describe_mode(job.spec.wandb), *describe(job.spec, runs_root(job.spec))]:
        out.print(line, markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_cmd)
