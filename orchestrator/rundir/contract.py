"""What a job.resolved.yaml must hold for this version to run it: checked whole when it is read
(rundir.resolved.parse_resolved), so a hand-edited or damaged file is refused in one line before a
resume claims or writes anything, instead of failing inside the training process or half-way through
a resume. Plain Python: the training process reads the contract too."""

from __future__ import annotations

from typing import Any

# `schema_version`: bumped when the layout of job.resolved.yaml changes, so that a run directory made by
# one version and resumed by another (a Kaggle session days later, a Slurm job requeued after an upgrade)
# is read knowingly. A file without it was written before versions were kept, in version 1's layout.
SCHEMA_VERSION = 1

# The launchers a plan may name (launch.BACKENDS' keys; tests/unit/test_resolved_contract.py ties the two).
LAUNCHERS = ("local", "torchrun", "xla")
WANDB_MODES = ("online", "offline", "disabled")
# The hooks a run folder may name (`callbacks:`): the training process imports and calls each, so a run folder on
# shared storage must not name anything else (`os:system`). The sweep's trial reporter is the one such hook; the
# environment's YOLO_ORCH_CALLBACKS (the user's own shell, the tests' fault hooks) is not read from a run folder.
SWEEP_TRIAL_HOOK = "orchestrator.sweep.trial_callback:attach"
RUN_FOLDER_HOOKS = (SWEEP_TRIAL_HOOK,)
# model.train() arguments the training process sets itself (worker/train.py): in train_args they would
# start the run and then fail ("multiple values for keyword argument 'project'")
WORKER_SET_ARGS = ("project", "name", "exist_ok", "trainer", "resume")
# train_args whose type and range Ultralytics needs: (kind, minimum); a float also takes an int
NUMBER_ARGS: dict[str, tuple[type, float]] = {
    "epochs": (int, 1), "batch": (int, 1), "nbs": (int, 1), "workers": (int, 0), "patience": (int, 0),
    "seed": (int, 0),
    "lr0": (float, 0), "lrf": (float, 0), "momentum": (float, 0), "weight_decay": (float, 0),
    "warmup_epochs": (float, 0), "warmup_momentum": (float, 0), "warmup_bias_lr": (float, 0),
}


def contract_problems(doc: Any) -> list[str]:
    """Every way `doc` is not a job.resolved.yaml this version can run, one line each naming the field
    (types, enums, ranges, the keys the worker sets itself): a hand-edited or damaged file is refused
    before anything is claimed or written, never half-run."""
    if not isinstance(doc, dict):
        return ["not a mapping: not a run's resolved job"]
    problems = _version_problems(doc.get("schema_version", 1))
    job, plan = doc.get("job"), doc.get("plan")
    if not isinstance(plan, dict):
        return problems + ["plan: missing or not a mapping (not a run's resolved job)"]
    if not isinstance(job, dict):
        return problems + ["job: missing or not a mapping (the validated job spec the run was planned from)"]
    if not isinstance(plan.get("devices"), str) or not plan.get("devices"):
        problems.append("plan.devices: missing or not a device spec's text")
    if plan.get("launcher", "local") not in LAUNCHERS:
        problems.append(f"plan.launcher: {plan.get('launcher')!r} is not a launcher ({', '.join(LAUNCHERS)})")
    if doc.get("wandb_mode", "disabled") not in WANDB_MODES:
        problems.append(f"wandb_mode: {doc.get('wandb_mode')!r} is not one of {', '.join(WANDB_MODES)}")
    problems += _section_problems(doc)
    args = plan.get("train_args")
    if not isinstance(args, dict):
        return problems + ["plan.train_args: missing or not a mapping"]
    problems += [f"plan.train_args.{key}: set by the training process itself; remove it" for key in WORKER_SET_ARGS
                 if key in args]
    problems += [p for key, rule in NUMBER_ARGS.items() if key in args
                 for p in [_number_problem(f"plan.train_args.{key}", args[key], *rule)] if p]
    if "epochs" not in args:
        problems.append("plan.train_args.epochs: missing")
    if not isinstance(job.get("name"), str) or not job.get("name"):
        problems.append("job.name: missing or not text")
    problem = _number_problem("job.epochs", job.get("epochs"), int, 1)
    if problem:
        problems.append(problem)
    elif is_int(args.get("epochs")) and job["epochs"] != args["epochs"]:
        problems.append(f"job.epochs: {job['epochs']} disagrees with plan.train_args.epochs {args['epochs']} "
                        "(the file was edited; the plan's value is what trains)")
    return problems


def _section_problems(doc: dict) -> list[str]:
    """The optional sections' shapes, and the hooks the training process would import (RUN_FOLDER_HOOKS)."""
    problems = []
    callbacks = doc.get("callbacks") or []
    if not isinstance(callbacks, list):
        problems.append(f"callbacks: {callbacks!r} is not a list of hooks")
        callbacks = []
    problems += [f"callbacks: {hook!r} is not a hook a run may name (only {', '.join(RUN_FOLDER_HOOKS)}): the "
                 "training process would import and call it" for hook in callbacks if hook not in RUN_FOLDER_HOOKS]
    for key, kind in (("sweep", dict), ("resume", dict), ("oom", dict), ("resumes", list), ("kaggle", dict)):
        if doc.get(key) is not None and not isinstance(doc[key], kind):
            problems.append(f"{key}: {doc[key]!r} is not a {'mapping' if kind is dict else 'list'}")
    oom = doc.get("oom") if isinstance(doc.get("oom"), dict) else {}
    cap = oom.get("max_batch_per_device")
    if cap is not None and (problem := _number_problem("oom.max_batch_per_device", cap, int, 1)):
        problems.append(problem)
    if not isinstance(oom.get("history") or [], list):
        problems.append(f"oom.history: {oom['history']!r} is not a list")
    if doc.get("deadline") is not None and (problem := _number_problem("deadline", doc["deadline"], float, 0)):
        problems.append(problem)
    return problems


def _version_problems(version: Any) -> list[str]:
    if not is_int(version):
        return [f"schema_version: {version!r} is not a layout version (an integer, 1 to {SCHEMA_VERSION})"]
    if version < 1:
        return [f"schema_version: {version} is outside 1 to {SCHEMA_VERSION}"]
    return []


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number_problem(field_name: str, value: Any, kind: type, minimum: float) -> str | None:
    """A float with an integer's value is an integer, as Ultralytics' own check takes it (`workers: 2.0`
    passes `plan`, so it must pass here)."""
    real = isinstance(value, float) and value == value and abs(value) != float("inf")
    fits = is_int(value) or (real and (kind is float or value.is_integer()))
    if not fits:
        return f"{field_name}: {value!r} is not {'an integer' if kind is int else 'a number'}"
    if value < minimum:
        return f"{field_name}: {value} is below {minimum:g}"
    return None
