"""Resume and OOM recovery, orchestrator side (pure: no torch, no ultralytics).

Both work on the run's `job.resolved.yaml`, the single source of truth of a run:

- `replan(resolved, devices=..., max_batch_per_device=...)` runs the scaler again from the
  stored job and reference-scale hyperparameters (not from the job file, which may have
  changed since) and returns the new `plan` section: same images per optimizer step, the
  batch/nbs split and the device argument for the new target.
- `plan_oom_restart(run_dir, ...)` halves the per-device batch through the scaler
  (`max_batch_per_device` = half; nbs is raised so accumulation keeps the images per
  optimizer step) and tells the worker to continue from weights/last.pt (or start over
  when there is none).
- `prepare_resume(row, devices)` checks a registry row can be resumed, makes again what the run
  needs and can be made again (a generated dataset: `restore_data`), and writes the `resume`
  section the worker reads.

The training process's side lives in orchestrator/worker/recovery.py; they share only the
run-directory contract (orchestrator/rundir.py: the exit codes, the weight paths).
"""

from __future__ import annotations

import time
from pathlib import Path

from orchestrator import launch
from orchestrator import plan as planmod
from orchestrator.devices import DeviceSpecError, parse_devices
from orchestrator.rundir import (LAST, RESOLVED, RESUME_PATCHED, SCHEMA_VERSION, RunDirVersionError, completed_epochs,
                                 dump_yaml, load_own_yaml, load_resolved, write_text_atomic)
from orchestrator.jobspec.errors import SpecError
from orchestrator.jobspec.job import JobSpec


def save_resolved(run_dir: Path, resolved: dict) -> None:
    """Written back in this version's layout (load_resolved refused a newer one): it says so."""
    resolved = {"schema_version": SCHEMA_VERSION, **{k: v for k, v in resolved.items() if k != "schema_version"}}
    write_text_atomic(Path(run_dir) / RESOLVED, dump_yaml(resolved))
    # a stale patched checkpoint from a killed attempt must never be read by a rank of the next one
    (Path(run_dir) / RESUME_PATCHED).unlink(missing_ok=True)


def replan(resolved: dict, devices: str | None = None, max_batch_per_device: int | None = None) -> dict:
    """A new `plan` section for `devices` (default: the run's) under the run's stored job, hyp and
    policy. The per-device batch cap is the tighter of the job's, any earlier OOM cap, and the
    one given. Raises SpecError (field-named) when the scaler refuses."""
    old = resolved["plan"]
    spec = JobSpec.model_validate(resolved["job"])
    try:
        target_spec = parse_devices(devices or old["devices"])
    except DeviceSpecError as exc:
        raise SpecError(f"--devices: {exc}") from None
    caps = [c for c in (max_batch_per_device, (resolved.get("oom") or {}).get("max_batch_per_device")) if c]
    cap = min(caps) if caps else None
    data = old.get("data") or {}
    scaled = planmod.scale_for(spec, old["hyp"], data.get("nc"), data.get("train_images"), target_spec,
                               old.get("policy") or spec.scaling.policy, cap)
    args = dict(old["train_args"])
    args.update(scaled.passed)
    args["device"] = target_spec.ultralytics_device()
    new = dict(old)
    new.update(devices=target_spec.text, world_size=target_spec.world_size, launcher=target_spec.backend,
               train_args=args, scaling=scaled.as_json(), warnings=list(scaled.warnings))
    if target_spec.nodes == 1 and target_spec.text != old["devices"]:
        new.pop("launch", None)  # multi-node options belong to the old device spec
    return new


def images_per_step(plan: dict) -> int | None:
    eff = (plan.get("scaling") or {}).get("effective") or {}
    return eff.get("images_per_step")


def batch_per_device(plan: dict) -> int:
    return int(plan["train_args"]["batch"]) // max(int(plan.get("world_size") or 1), 1)


def plan_oom_restart(run_dir: Path, retries_used: int, oom_event: dict | None = None) -> dict:
    """Rewrite the run's resolved job for a restart after an OOM. Returns a record of the step
    (also appended to resolved["oom"]["history"]). Raises SpecError when the batch cannot shrink."""
    resolved = load_resolved(run_dir)
    old = resolved["plan"]
    b_old = batch_per_device(old)
    if b_old <= 1:
        raise SpecError("out of memory with 1 image per device: the batch cannot be halved further; "
                        "lower imgsz, use a smaller model or a device with more memory")
    cap = b_old // 2
    new = replan(resolved, max_batch_per_device=cap)
    b_new = batch_per_device(new)
    has_ckpt = (Path(run_dir) / LAST).is_file()
    step = {
        "time": time.time(),
        "retry": retries_used + 1,
        "epoch": (oom_event or {}).get("epoch"),
        "batch_per_device": [b_old, b_new],
        "batch": [old["train_args"]["batch"], new["train_args"]["batch"]],
        "nbs": [old["train_args"]["nbs"], new["train_args"]["nbs"]],
        "accumulate": [_eff(old, "accumulate"), _eff(new, "accumulate")],
        "images_per_step": [images_per_step(old), images_per_step(new)],
        "restart_from": str(LAST) if has_ckpt else "scratch",
    }
    oom = resolved.setdefault("oom", {})
    oom["max_batch_per_device"] = cap
    oom.setdefault("history", []).append(step)
    resolved["plan"] = new
    resolved["resume"] = {"checkpoint": str(LAST), "if_missing": "scratch", "reason": "oom"} if has_ckpt else None
    save_resolved(run_dir, resolved)
    return step


def describe_oom_step(step: dict) -> str:
    b0, b1 = step["batch_per_device"]
    n0, n1 = step["nbs"]
    a0, a1 = step["accumulate"]
    i0, i1 = step["images_per_step"]
    where = f" at epoch {step['epoch']}" if step.get("epoch") else ""
    return (f"CUDA out of memory{where}: retry {step['retry']}, per-device batch {b0} -> {b1}, nbs {n0} -> {n1}, "
            f"accumulate {a0} -> {a1}, images per optimizer step {i0} -> {i1}; "
            f"restarting from {step['restart_from']}")


def _eff(plan: dict, key: str):
    return ((plan.get("scaling") or {}).get("effective") or {}).get(key)


def node0_run_dir(run_dir: Path, resolved: dict) -> Path:
    """Where a run's checkpoints are: its own directory, or for node K > 0 of a multi-node run started
    with `--run-id BASE` (run ids BASE-node0, BASE-node1, ...) node 0's, its sibling on the shared
    filesystem (only global rank 0 writes weights)."""
    node = int(((resolved.get("plan") or {}).get("launch") or {}).get("node_rank") or 0)
    suffix = f"-node{node}"
    if node == 0 or not run_dir.name.endswith(suffix):
        return run_dir
    return run_dir.with_name(run_dir.name[: -len(suffix)] + "-node0")


def read_run(run_id: str, run_dir: Path) -> dict:
    """The run's job.resolved.yaml for a command that continues it: a newer layout is refused, one line."""
    try:
        return load_resolved(run_dir)
    except RunDirVersionError as exc:
        raise SpecError(f"RUN: {run_id}: {exc}") from None


def prepare_resume(row: dict, devices: str | None = None, restart_ok: bool = False,
                   launch_opts: dict | None = None) -> dict:
    """Check a registry row can be resumed, re-plan for `devices` when they differ, and write the
    `resume` section. Returns {"plan": ..., "from_epoch": N, "replanned": bool, "note": ...}.
    Raises SpecError with the fix when it cannot. `restart_ok` (a requeued Slurm job): a run
    stopped before its first checkpoint starts again from epoch 1 in the same run directory.
    `launch_opts`: this node's rank and rendezvous now (a requeued multi-node job's new allocation)."""
    run_id = row["id"]
    if row["state"] in ("running", "queued"):
        raise SpecError(f"RUN: {run_id} is still {row['state']} (pid {row.get('pid')}); "
                        "stop it first (Ctrl-C in its terminal, or kill its process)")
    if row["state"] == "finished":
        raise SpecError(f"RUN: {run_id} finished all its epochs; nothing to resume (submit the job again "
                        "to train longer)")
    run_dir = Path(row["run_dir"] or "")
    if not (run_dir / RESOLVED).is_file():
        raise SpecError(f"RUN: {run_id}: run directory {run_dir} is missing or has no {RESOLVED}")
    resolved = read_run(run_id, run_dir)
    if launch_opts:
        resolved["plan"]["launch"] = launch_opts
    weights_dir = node0_run_dir(run_dir, resolved)
    if not (weights_dir / LAST).is_file() and not restart_ok:
        raise SpecError(f"RUN: {run_id} stopped before its first epoch ended ({weights_dir / LAST} does not exist); "
                        "nothing to resume: submit the job again")
    old_devices = resolved["plan"]["devices"]
    replanned = False
    if devices is not None:
        try:
            wanted = parse_devices(devices)
        except DeviceSpecError as exc:
            raise SpecError(f"--devices: {exc}") from None
        if wanted.text != old_devices:
            new = replan(resolved, devices=wanted.text)
            missing = launch.unavailable(new["launcher"], wanted)
            if missing:
                raise SpecError(f"--devices: {missing}")
            resolved["plan"] = new
            replanned = True
    done = completed_epochs(weights_dir)
    epochs = int(resolved["plan"]["train_args"]["epochs"])
    if done >= epochs:
        raise SpecError(f"RUN: {run_id} already recorded {done}/{epochs} epochs; nothing to resume")
    restored = restore_data(resolved, run_id)
    checkpoint = LAST if weights_dir == run_dir else weights_dir / LAST  # (absolute: node 0's)
    resolved["resume"] = {"checkpoint": str(checkpoint), "if_missing": "scratch" if restart_ok else "fail",
                          "reason": "resume"}
    history = resolved.setdefault("resumes", [])
    history.append({"time": time.time(), "from_epoch": done + 1, "devices": resolved["plan"]["devices"],
                    "previous_devices": old_devices, "replanned": replanned})
    save_resolved(run_dir, resolved)
    note = (f"resume from epoch {done + 1}/{epochs} on {resolved['plan']['devices']}" if (weights_dir / LAST).is_file()
            else f"start again from epoch 1/{epochs} (it stopped before its first checkpoint)")
    if restored:
        note += f"; {restored}"
    if replanned:
        p = resolved["plan"]
        note += (f" (re-planned from {old_devices}: batch {p['train_args']['batch']}, nbs {p['train_args']['nbs']}, "
                 f"{images_per_step(p)} images per optimizer step)")
    return {"plan": resolved["plan"], "from_epoch": done + 1, "replanned": replanned, "note": note,
            "resolved": resolved}


def restore_data(resolved: dict, run_id: str) -> str | None:
    """Before anything starts: what the run trains on, made again where it can be. A generated dataset
    whose cache was cleaned, or that was generated on another node, is generated again here (the same
    config and seed give the same images) and the plan points at it; a dataset the job names that is
    gone is named at once. Returns a note when something was made again."""
    args = resolved["plan"]["train_args"]
    data = Path(str(args.get("data") or ""))
    job = resolved.get("job") or {}
    synth = job["data"].get("synth") if isinstance(job.get("data"), dict) else None
    if synth is not None:
        if data.exists():
            return None
        from orchestrator.jobspec.job import SynthData

        made = planmod.make_synth_data(SynthData.model_validate(synth), job.get("task") or "detect")
        args["data"] = str(made)
        return f"its generated dataset ({data}) was missing here: generated again as {made}"
    missing = _missing_data(data)
    if missing:
        raise SpecError(f"RUN: {run_id} trains on {missing}, which does not exist here; put the dataset back "
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
