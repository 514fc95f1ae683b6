"""`yolo-orch sweep SWEEP.yaml --dry-run`: what the sweep would do, without doing any of it.

No storage is opened, no file is written, no torch, Ultralytics or Optuna is imported. The
search space is shown twice: as sampled (reference scale, what best.yaml will hold) and as
the trials' target devices will get it. Each end of a numeric dimension (each choice of a
categorical one) is planned like a trial (base job + that one value, through the scaler), so
a range the scaler changes (lr0, weight decay, warmup on more devices) shows the values
Ultralytics will really receive, and a range it makes inert is flagged.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.plan import make_plan
from orchestrator.sweep.objective import trial_job
from orchestrator.sweep.study import is_sqlite, redact

if TYPE_CHECKING:
    from rich.console import RenderableType

    from orchestrator.jobspec.job_data import DataInfo
    from orchestrator.plan import Plan
    from orchestrator.sweep.loader import LoadedSweep, Param


def _options(component: dict[str, Any]) -> str:
    """{'name': 'median', 'n_warmup_steps': 5} -> 'median (n_warmup_steps 5)'."""
    opts = {k: v for k, v in component.items() if k != "name"}
    return component["name"] + (f" ({', '.join(f'{k} {v}' for k, v in opts.items())})" if opts else "")


def _storage_state(url: str) -> str:
    """Whether running the sweep would create the study's SQLite file or resume one (other
    databases: unknown without connecting, and a dry run does not connect)."""
    if not is_sqlite(url):
        return "not checked (a dry run does not connect)"
    path = url.split(":///", 1)[1] if ":///" in url else ""
    if not path or path == ":memory:":
        return "in memory"
    return "exists: the sweep resumes its study" if Path(path).exists() else "new file"


def _ends(p: "Param") -> list:
    if p.kind == "categorical":
        return list(p.choices)
    return [p.low, p.high]


def _sampled_optimizer(sweep: "LoadedSweep", p: "Param") -> dict[str, Any]:
    """Every trial of a sweep that samples `hyp.optimizer` sets one, so the other dimensions are
    planned under a sampled optimizer (its first choice other than auto), not the base job's: under
    the base's optimizer=auto, lr0 would look inert although every trial receives it."""
    opt = next((q for q in sweep.params if q.name == "hyp.optimizer"), None)
    if opt is None or opt is p:
        return {}
    pinned = next((c for c in opt.choices if str(c).lower() != "auto"), None)
    return {opt.name: pinned} if pinned is not None else {}


def _as_planned(sweep: "LoadedSweep", p: "Param", data: "DataInfo") -> tuple[dict[str, Any], list[str]]:
    """The value Ultralytics receives (and, where the scaler tracks it, applies) at each end of `p`,
    every other value at the base job's. `data`: the base job's, described once (a trial only
    changes hyperparameters and overrides)."""
    passed, applied, notes = [], [], []
    context = _sampled_optimizer(sweep, p)
    for value in _ends(p):
        plan = make_plan(trial_job(sweep, {**context, p.name: value}, 0), data=data)
        passed.append(plan.train_args.get(p.key))
        applied.append(plan.scaled.effective.get(p.key, plan.train_args.get(p.key)))
    if p.kind != "categorical" and passed[0] == passed[1] and p.low != p.high:
        notes.append(f"{p.name}: the scaler passes {passed[0]} at both ends of {p.low}..{p.high} on these "
                     "devices, so searching it changes nothing there")
    return {"sampled": _ends(p), "passed": passed, "applied": applied}, notes


def space_as_planned(sweep: "LoadedSweep", base: "Plan") -> tuple[list[dict[str, Any]], list[str]]:
    """Every dimension with its ends as sampled, passed and applied; and a note for each one the
    target devices make inert (the real sweep prints those too). `base`: the base job's plan."""
    space, notes = [], []
    for p in sweep.params:
        ends, inert = _as_planned(sweep, p, base.data)
        notes += inert
        space.append({"name": p.name, "kind": p.kind, "describe": p.describe(), **ends})
    return space, notes


def preview(sweep: "LoadedSweep", base: "Plan", url: str, n_trials: int, timeout: float | None,
            epoch_budget: int | None, workers: int) -> dict[str, Any]:
    """`base`: the base job's plan (the caller has made it to check the job can run here)."""
    spec = sweep.spec
    space, notes = space_as_planned(sweep, base)
    return {
        "dry_run": True,
        "study": sweep.study,
        "storage": redact(url),
        "storage_state": _storage_state(url),
        "study_dir": str(sweep.study_dir),
        "objectives": [o.model_dump() for o in spec.objectives],
        "sampler": spec.sampler.model_dump(exclude_none=True),
        "pruner": spec.pruner.model_dump(exclude_none=True),
        "n_trials": n_trials,
        "timeout": timeout,
        "epoch_budget": epoch_budget,
        "workers": workers,
        "base": {"job": sweep.base.spec.name, "devices": base.devices.text, "world_size": base.devices.world_size,
                 "launcher": base.launcher, "policy": base.scaled.policy, "epochs": sweep.base.spec.epochs},
        "space": space,
        "enqueue": sweep.enqueue,
        # where `startup: local` draws its startup trials, and how far (None: anywhere in the space)
        "startup_start": sweep.start_point() if spec.sampler.startup == "local" else None,
        "startup_scale": spec.sampler.local_scale if spec.sampler.startup == "local" else None,
        "warnings": base.warnings + notes,
    }


def _fmt(v) -> str:
    if v is None:
        return "-"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _span(values: list) -> str:
    return " / ".join(_fmt(v) for v in values) if len(values) != 2 else f"{_fmt(values[0])} .. {_fmt(values[1])}"


def render(summary: dict[str, Any]) -> list["RenderableType"]:
    from rich.table import Table

    base = summary["base"]
    head = Table(title=f"Sweep {summary['study']} (dry run)", show_header=False, title_justify="left")
    head.add_column(style="bold cyan", no_wrap=True)
    head.add_column(overflow="fold")
    budget = [f"{summary['n_trials']} complete+pruned trials"]
    if summary["epoch_budget"]:
        budget.append(f"{summary['epoch_budget']} epochs")
    if summary["timeout"]:
        budget.append(f"{summary['timeout']:g} s")
    rows = [
        ("objective", ", ".join(f"{o['metric']} ({o['direction']})" for o in summary["objectives"])),
        ("sampler / pruner", f"{_options(summary['sampler'])} / {_options(summary['pruner'])}"),
        ("budget", ", ".join(budget) + f"; {summary['workers']} local worker(s)"),
        ("storage", f"{summary['storage']} ({summary['storage_state']})"),
        ("base job", f"{base['job']}: {base['epochs']} epochs a trial on devices {base['devices']} "
                     f"({base['launcher']}, scaling policy {base['policy']})"),
        ("enqueued first", str(len(summary["enqueue"])) + " trial(s)"),
    ]
    if summary.get("startup_start") is not None:
        rows.append(("startup draws near", ", ".join(f"{k} {_fmt(v)}" for k, v in summary["startup_start"].items())
                     + f" (steps of {summary['startup_scale']:g} x each range)"))
    for k, v in rows:
        head.add_row(k, v)
    space = Table(title=f"Search space: sampled at reference scale, as trials on devices {base['devices']} get it",
                  header_style="bold", title_justify="left")
    for col in ("parameter", "sampled", "passed to Ultralytics", "applied by the optimizer"):
        space.add_column(col, overflow="fold")
    for p in summary["space"]:
        changed = p["passed"] != p["sampled"] or p["applied"] != p["passed"]
        space.add_row(p["name"], p["describe"], _span(p["passed"]) if changed else "as sampled",
                      _span(p["applied"]) if changed else "as sampled")
    return [head, space]
