"""Re-planning a run, orchestrator side (pure: no torch, no ultralytics), for a resume on other
devices (resume.py) and a restart after an out-of-memory exit (runner.py). Both work on the run's
`job.resolved.yaml` (the typed `rundir.ResolvedRun`), the single source of truth of a run:

- `replan(resolved, devices=..., max_batch_per_device=...)` runs the scaler again from the
  stored job and reference-scale hyperparameters (not from the job file, which may have
  changed since) and returns the new `RunPlan`: same images per optimizer step, the
  batch/nbs split and the device argument for the new target.
- `plan_oom_restart(run_dir, ...)` halves the per-device batch through the scaler
  (`max_batch_per_device` = half; nbs is raised so accumulation keeps the images per
  optimizer step) and tells the worker to continue from weights/last.pt (or start over
  when there is none).
The training process's side lives in orchestrator/worker/recovery.py; they share only the
run-directory contract (orchestrator/rundir/: the run's type, the exit codes, the weight paths).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from orchestrator import plan as planmod
from orchestrator.devices import DeviceSpec, DeviceSpecError, parse_devices
from orchestrator.rundir import LAST, OomStep, ResolvedRun, ResumeOrder, RunPlan, load_resolved
from orchestrator.rundir.resume_order import save_resolved
from orchestrator.errors import UserError
from orchestrator.jobspec.job import JobSpec


def replan(resolved: ResolvedRun, devices: DeviceSpec | str | None = None,
           max_batch_per_device: int | None = None) -> RunPlan:
    """A new plan for `devices` (default: the run's) under the run's stored job, hyp and policy, put
    together and checked by the plan's own assembler (plan.assemble): a launcher or optimizer the
    installed release cannot run is refused here as `plan` refuses it. The per-device batch cap is the
    tighter of the job's, any earlier OOM cap, and the one given. Raises UserError (field-named)."""
    old = resolved.plan
    spec = JobSpec.model_validate(resolved.job.document)
    try:  # a resume hands its --devices on parsed (resume.devices_flag)
        target_spec = devices if isinstance(devices, DeviceSpec) else parse_devices(devices or old.devices)
    except DeviceSpecError as exc:
        raise exc.under("--devices") from None
    caps = [c for c in (max_batch_per_device, resolved.oom_max_batch_per_device) if c]
    made = planmod.assemble(spec, old.hyp, old.nc, old.train_images, target_spec, old.policy or spec.scaling.policy,
                            old.train_args, max_batch_per_device=min(caps) if caps else None)
    moved = target_spec.nodes == 1 and target_spec.text != old.devices  # multi-node options: the old spec's
    return replace(old, devices=target_spec.text, world_size=target_spec.world_size, launcher=target_spec.backend,
                   train_args=made.train_args, scaling=made.scaled.as_json(), warnings=list(made.scaled.warnings),
                   ultralytics=made.release, launch=None if moved else old.launch)


def plan_oom_restart(run_dir: Path, retries_used: int, oom_event: dict | None = None) -> OomStep:
    """Rewrite the run's resolved job for a restart after an OOM. Returns a record of the step
    (also appended to the run's OOM history). Raises UserError when the batch cannot shrink."""
    resolved = load_resolved(run_dir)
    old = resolved.plan
    if old.batch_per_device <= 1:
        raise UserError("out of memory with 1 image per device: the batch cannot be halved further; "
                        "lower imgsz, use a smaller model or a device with more memory")
    cap = old.batch_per_device // 2
    new = replan(resolved, max_batch_per_device=cap)
    has_ckpt = (Path(run_dir) / LAST).is_file()
    step = OomStep(time=time.time(), retry=retries_used + 1, epoch=(oom_event or {}).get("epoch"),
                   batch_per_device=[old.batch_per_device, new.batch_per_device], batch=[old.batch, new.batch],
                   nbs=[old.nbs, new.nbs], accumulate=[old.accumulate, new.accumulate],
                   images_per_step=[old.images_per_step, new.images_per_step],
                   restart_from=str(LAST) if has_ckpt else "scratch")
    resolved.oom_max_batch_per_device = cap
    resolved.oom_history.append(step)
    resolved.plan = new
    resolved.resume = ResumeOrder(str(LAST), if_missing="scratch", reason="oom") if has_ckpt else None
    save_resolved(run_dir, resolved)
    return step


def describe_oom_step(step: OomStep) -> str:
    b0, b1 = step.batch_per_device
    n0, n1 = step.nbs
    a0, a1 = step.accumulate
    i0, i1 = step.images_per_step
    where = f" at epoch {step.epoch}" if step.epoch else ""
    return (f"CUDA out of memory{where}: retry {step.retry}, per-device batch {b0} -> {b1}, nbs {n0} -> {n1}, "
            f"accumulate {a0} -> {a1}, images per optimizer step {i0} -> {i1}; "
            f"restarting from {step.restart_from}")


def plan_for_nodes_left(run_dir: Path, devices: str) -> str:
    """Re-plan a run for the nodes a lost one left (a Ray placement: launch/ray_backend.py) through the scaler,
    images per optimizer step kept as it decides, and write it into job.resolved.yaml (the next attempt's
    start writes its resume order). Returns the line that says what changed and why. Raises UserError."""
    resolved = load_resolved(run_dir)
    old = resolved.plan
    new = replan(resolved, devices=devices)
    resolved.plan = new
    save_resolved(run_dir, resolved)
    changed = [f"{name} {getattr(old, name)} -> {getattr(new, name)}"
               for name in ("batch", "batch_per_device", "nbs", "accumulate", "images_per_step")
               if getattr(old, name) != getattr(new, name)]
    reasons = list((new.scaling or {}).get("reasons") or [])
    kept = "kept" if old.images_per_step == new.images_per_step else "changed"
    return "; ".join([f"a node was lost: re-planned from {old.devices} to {new.devices} ({new.images_per_step} images "
                      f"per optimizer step, {kept})", *changed, *reasons])
