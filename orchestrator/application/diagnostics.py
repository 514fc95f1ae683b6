"""What `doctor` does, without a terminal: this machine's readiness checks, or (`--verify-plan JOB`) the job
planned as `plan` plans it and held against the installed Ultralytics trainer. The command renders the checks."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Diagnosis:
    title: str
    checks: list  # [doctor.checks.Check]

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)


def diagnose(runs_dir: Path, storage: str | None = None, verify_plan: Path | None = None,
             sets: list[str] = ()) -> Diagnosis:
    if verify_plan is None:
        from orchestrator.doctor import run_checks

        return Diagnosis("yolo-orch doctor", run_checks(runs_dir, storage=storage))
    from orchestrator.doctor.verify_plan import verify
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    plan = make_plan(load_job(verify_plan, sets=list(sets)))
    return Diagnosis(f"yolo-orch doctor --verify-plan {verify_plan} (Ultralytics {plan.ultralytics})",
                     verify(plan, plan.ultralytics))
