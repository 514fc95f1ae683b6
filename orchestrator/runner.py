"""Submit: turn a Plan into a run directory and a supervised training process."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from orchestrator.events import LOG, RESOLVED, SUMMARY, EventTail, write_text_atomic
from orchestrator.launch import local, process, torchrun
from orchestrator.plan import Plan
from orchestrator.spec.errors import SpecError
from orchestrator.spec.loader import dump_yaml
from orchestrator.tracking.wandb_mode import resolve_mode

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
BUILT_LAUNCHERS = {"local": local.command, "torchrun": torchrun.command}


@dataclass
class RunOutcome:
    run_id: str
    run_dir: Path
    state: str  # finished | failed | killed
    exit_code: int
    summary: dict | None = None
    events: list[dict] = field(default_factory=list)

    @property
    def last_checkpoint(self) -> Path | None:
        last = self.run_dir / "weights" / "last.pt"
        return last if last.exists() else None


def new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def check_launchable(plan: Plan) -> None:
    if plan.launcher not in BUILT_LAUNCHERS:
        raise SpecError(
            f"target.devices: '{plan.devices.text}' needs the '{plan.launcher}' launcher, which this version "
            "does not provide yet; use 'cpu' or one GPU"
        )


def ensure_data(plan: Plan) -> None:
    if plan.data.synth is not None and not plan.data.yaml_path.exists():
        from orchestrator.data.synth import generate_dataset

        cfg = plan.data.synth
        generate_dataset(plan.data.yaml_path.parent, images=cfg.images, val_images=cfg.val_images,
                         classes=cfg.classes, imgsz=cfg.imgsz, seed=cfg.seed)


def resolved_document(plan: Plan, run_id: str, run_dir: Path, wandb_mode: str) -> dict:
    spec = plan.job.spec
    plan_json = plan.as_json()
    plan_json["hyp"] = plan.hyp
    return {
        "run_id": run_id,
        "run_dir": str(run_dir),
        "job_file": str(plan.job.path) if plan.job.path else None,
        "wandb_mode": wandb_mode,
        "job": spec.model_dump(mode="json"),
        "plan": plan_json,
    }


def create_run(plan: Plan, runs_dir: Path | None = None) -> tuple[str, Path]:
    """Everything is validated by now: create the run dir and write the resolved job."""
    check_launchable(plan)
    ensure_data(plan)
    spec = plan.job.spec
    root = Path(runs_dir or spec.runs_dir).expanduser().resolve()
    run_id = new_run_id()
    run_dir = root / spec.name / run_id
    if not run_dir.resolve().is_relative_to(root):  # names are sanitised by the spec; belt and braces
        raise SpecError(f"name: '{spec.name}' would write outside {root}")
    run_dir.mkdir(parents=True, exist_ok=False)
    mode, _ = resolve_mode(spec.wandb)
    write_text_atomic(run_dir / RESOLVED, dump_yaml(resolved_document(plan, run_id, run_dir, mode)))
    return run_id, run_dir


def child_env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": f"{PACKAGE_ROOT}{os.pathsep}{path}" if path else str(PACKAGE_ROOT)}


def execute(plan: Plan, run_id: str, run_dir: Path, on_event: Callable[[dict], None] = lambda e: None,
            poll_s: float = 0.5) -> RunOutcome:
    cmd = BUILT_LAUNCHERS[plan.launcher](run_dir)
    proc = process.start(cmd, run_dir / LOG, env=child_env())
    tail = EventTail(run_dir / "events.jsonl")
    events: list[dict] = []
    state = "failed"
    try:
        with process.interrupts_raise():
            while proc.poll() is None:
                for event in tail.read_new():
                    events.append(event)
                    on_event(event)
                time.sleep(poll_s)
    except process.Interrupted:
        process.stop_group(proc)
        state = "killed"
    else:
        process.stop_group(proc, grace_s=0)  # reap stray dataloader workers, if any
    for event in tail.read_new():
        events.append(event)
        on_event(event)
    code = proc.returncode
    summary = None
    if (run_dir / SUMMARY).exists() and state != "killed":
        import json

        summary = json.loads((run_dir / SUMMARY).read_text())
        state = "finished" if code == 0 else "failed"
    return RunOutcome(run_id, run_dir, state, code if state != "killed" else 130, summary, events)
