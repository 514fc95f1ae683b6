"""`yolo-orch doctor --verify-plan JOB`: the plan against the installed Ultralytics trainer, for a release
newer than the tested ones, or for this project when Ultralytics releases again.

The job's planned arguments (optimizer, lr0, momentum, weight decay, warmup, batch and nbs) train a few
steps of the smallest YOLO on a generated dataset of two batches an epoch, 3 epochs, one CPU process
(orchestrator/doctor/trainer_probe.py, in a subprocess); what the trainer applied at each step is held
against what the plan's formulas (scaling/ultralytics_math.py, with the installed release's row of
scaling/releases.py) say for that same small run: batches an epoch, the optimizer, weight decay, each
group's initial lr, accumulate and every group's lr through warmup, where warmup leaves accumulate, and
what optimizer=auto picks on both sides of 10,000 iterations, and the momentum SGD keeps after warmup.
One check per quantity, and a first line that says what was verified and what was not: one CPU process
trains the probe whatever the job's devices (a DDP or XLA launch is not run), on the job's own model
where it is a detect model built from a yaml (else yolo11n)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orchestrator
from orchestrator.doctor.checks import FAIL, PASS, WARN, Check
from orchestrator.scaling import releases
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.effective import effective_values

EPOCHS = 3
IMGSZ = 64
PROBE_TIMEOUT_S = 300


def verify(plan, release: str) -> list[Check]:
    """Checks of `plan` (a Plan) against the installed trainer."""
    from orchestrator.data.synth import generate_dataset

    passed = {k: plan.scaled.passed[k] for k in ("batch", "nbs", "optimizer", "lr0", "momentum", "weight_decay",
                                                  "warmup_epochs", "warmup_bias_lr")}
    warmup_momentum = plan.train_args.get("warmup_momentum", um.DEFAULTS["warmup_momentum"])
    model = probe_model(plan)
    with tempfile.TemporaryDirectory(prefix="yolo-orch-verify-") as tmp:
        images = 2 * passed["batch"]  # two batches an epoch
        data = generate_dataset(Path(tmp) / "data", images=images, val_images=4, classes=2, imgsz=IMGSZ, seed=0)
        eff = effective_values(passed, 1, EPOCHS, images, "cpu", formulas=releases.formulas_for(release),
                               warmup_momentum=warmup_momentum)
        train = {"model": model, "data": str(data), "epochs": EPOCHS, "imgsz": IMGSZ, "device": "cpu",
                 "workers": 0, "plots": False, "val": False, "amp": False, "verbose": False, "seed": 0,
                 "deterministic": False, "project": tmp, "name": "verify", "exist_ok": True,
                 "warmup_momentum": warmup_momentum, **passed}
        auto = {**train, "optimizer": "auto", "epochs": 10001, "name": "auto"}
        probe = run_probe({"train": train, "auto": auto}, Path(tmp))
    scope = scope_check(plan, model)
    if isinstance(probe, str):
        return [scope, Check("verify-plan", FAIL, probe,
                             "see the trainer's error above; `yolo-orch doctor` checks the install")]
    return [scope, *compare(eff, release, probe)]


def probe_model(plan) -> str:
    """The job's own model where the probe (a detect trainer, built from scratch) can train it: a detect
    model yaml; else yolo11n.yaml."""
    model = str(plan.train_args.get("model") or "")
    detect = (plan.job.spec.task or "detect") == "detect"
    return model if detect and model.lower().endswith((".yaml", ".yml")) else "yolo11n.yaml"


def scope_check(plan, model: str) -> Check:
    """What the probe verified and what it did not, in one line."""
    devices = plan.devices.text
    one_process = plan.launcher == "local" and plan.devices.world_size <= 1
    not_run = [] if one_process else [f"the {plan.launcher} launch on {devices} ({plan.devices.world_size} "
                                      "devices): the formulas are the same per process, the launch itself is not run"]
    job_model = str(plan.train_args.get("model") or "")
    if model != job_model:
        not_run.append(f"the job's model {job_model} (the probe trains {model})")
    detail = (f"one CPU process trained {model} for {EPOCHS} epochs of 2 steps at {IMGSZ} px with the plan's "
              "arguments" + (f"; not verified: {'; '.join(not_run)}" if not_run else ""))
    return Check("what was verified", WARN if not_run else PASS, detail,
                 "`yolo-orch submit JOB` runs the launch itself (docs/distributed.md)" if not_run else "")


def run_probe(request: dict, cwd: Path, env: dict | None = None) -> dict | str:
    """The probe's record, or why there is none (its last error line)."""
    root = str(Path(orchestrator.__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [root, (env or os.environ).get("PYTHONPATH")]))
    try:
        r = subprocess.run([sys.executable, "-m", "orchestrator.doctor.trainer_probe", json.dumps(request)],
                           capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, cwd=cwd,
                           env={**(env or os.environ), "PYTHONPATH": path, "YOLO_OFFLINE": "1"})
    except subprocess.TimeoutExpired:
        return f"the trainer did not finish {EPOCHS} epochs of 2 steps in {PROBE_TIMEOUT_S} s"
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("PROBE ")), None)
    if r.returncode != 0 or line is None:
        errors = [ln for ln in r.stderr.splitlines() if ln.strip()]
        return f"the trainer failed: {errors[-1][:300] if errors else f'exit {r.returncode}'}"
    return json.loads(line[len("PROBE "):])


def compare(eff: dict[str, Any], release: str, probe: dict) -> list[Check]:
    steps = probe["train"]
    checks = [
        _same("batches per epoch", eff["batches_per_epoch"], steps["batches"]),
        _same("optimizer", eff["optimizer"], steps["optimizer"]),
        _same("weight decay (decayed groups)", eff["weight_decay"], max(steps["weight_decay"]), close=True),
        _same("initial lr (every group)", eff["lr0"], sorted({round(v, 12) for v in steps["steps"][0]["initial_lr"]
                                                               if not _musgd_boost(eff, v)}), close=True),
    ]
    expected = expected_steps(eff, release, steps)
    bad = [f"step {ni}: {what} {want:.6g} planned, {got:.6g} applied" for ni, what, want, got in expected
           if not math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12)]
    checks.append(Check("accumulate and lr through warmup", FAIL if bad else PASS,
                        "; ".join(bad[:3]) + (f" (and {len(bad) - 3} more)" if len(bad) > 3 else "") if bad else
                        f"{len(steps['steps'])} steps, {eff['warmup_iterations']} of them warmup, as planned"))
    checks.append(_same("accumulate after warmup", eff["accumulate_after_warmup"], steps["steps"][-1]["accumulate"]))
    if "momentum_after_warmup" in eff:  # SGD-family groups (others have no momentum to ramp)
        kept = [m for m in steps["steps"][-1].get("momentum") or [] if m is not None]
        checks.append(_same("momentum after warmup", eff["momentum_after_warmup"], sorted(set(kept)), close=True))
    if probe.get("auto"):
        checks.append(_same("optimizer=auto above 10,000 iterations", releases.formulas_for(release).auto_picks[0],
                            probe["auto"]["optimizer"]))
    return checks


def expected_steps(eff: dict, release: str, steps: dict) -> list[tuple[int, str, Any, Any]]:
    """(step, what, planned, applied) for every recorded step: which steps warm up (`ni <= nw`; `ni < nw`
    in 8.4.103-8.4.182), where accumulate's ramp ends (the capped accumulate from 8.4.183, nbs / batch
    before), which group's lr starts at warmup_bias_lr (the group named bias from 8.4.3, the first
    before); after warmup accumulate stays where the ramp left it and each lr follows the schedule."""
    f, version = releases.formulas_for(release), releases.parse(release) or releases.NEWEST
    nw, wbl = eff["warmup_iterations"], eff["warmup_bias_lr"]
    target = eff["accumulate"] if f.ramp_to_capped else eff["nbs"] / eff["batch"]
    accumulate, out = eff["accumulate"], []
    for ni, step in enumerate(steps["steps"]):
        warm = bool(nw) and (ni <= nw if f.warmup_last_step else ni < nw)
        if warm:
            accumulate = um.warmup_accumulate(ni, nw, target)
        out.append((ni, "accumulate", accumulate, step["accumulate"]))
        for j, (lr, lr0) in enumerate(zip(step["lr"], step["initial_lr"])):
            bias = steps["group_names"][j] == "bias" if version >= (8, 4, 3) else j == 0
            start = wbl if bias else 0.0
            want = start + (lr0 * step["lf"] - start) * ni / nw if warm else lr0 * step["lf"]
            out.append((ni, f"lr of group {j}", want, lr))
    return out


def _musgd_boost(eff: dict, lr0: float) -> bool:
    """MuSGD gives some head groups lr * 3 (build_optimizer)."""
    return eff["optimizer"] == "MuSGD" and math.isclose(lr0, 3 * eff["lr0"], rel_tol=1e-9)


def _same(name: str, planned: Any, applied: Any, close: bool = False) -> Check:
    if isinstance(applied, list):
        applied = applied[0] if len(applied) == 1 else applied
    ok = math.isclose(planned, applied, rel_tol=1e-9, abs_tol=1e-12) if close and isinstance(applied, float) \
        else planned == applied
    return Check(name, PASS if ok else FAIL, f"planned {planned}, applied {applied}",
                 "" if ok else "the plan's formula differs from this Ultralytics release's: report it with "
                 "`yolo-orch doctor --verify-plan JOB --json`")
