"""Results of a study: a summary (dict, JSON-able), the rich tables, `best.yaml` (the
winner's hyperparameters in the hyp/ preset format at reference scale), plots, and the
optuna-dashboard command. Written into the study folder `<runs>/sweeps/<study>/`:

    best.yaml          flat hyperparameters: `hyp: runs/sweeps/<study>/best.yaml` in any job
    summary.json       the machine-readable summary (the same as `--json`)
    history.html       optimization history (objective per trial, best so far)
    importances.html   parameter importances (needs 2+ finished trials)
    intermediate.html  the objective per epoch of every trial: where pruning cut
    pareto.html        several objectives: the Pareto front
    plotly.min.js      shared by the HTML files (offline: no CDN)
"""

from __future__ import annotations

import math
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from orchestrator.rundir import write_json_atomic, write_text_atomic
from orchestrator.jobspec.loader import resolve_hyp
from orchestrator.sweep.objective import trial_job
from orchestrator.sweep.study import done_count, epochs_spent, redact, state_counts, trial_epochs

if TYPE_CHECKING:
    import optuna
    from rich.console import RenderableType

    from orchestrator.sweep.loader import LoadedSweep

BEST_YAML = "best.yaml"
SUMMARY_JSON = "summary.json"


def _value(v):
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else round(f, 6)


def trial_record(t: "optuna.trial.FrozenTrial") -> dict[str, Any]:
    duration = (t.datetime_complete - t.datetime_start).total_seconds() \
        if t.datetime_complete and t.datetime_start else None
    return {
        "number": t.number,
        "state": t.state.name,
        "values": [_value(v) for v in t.values] if t.values else None,
        "params": t.params,
        "epochs": trial_epochs(t),
        "duration_s": round(duration, 1) if duration is not None else None,
        "run_id": t.user_attrs.get("run_id"),
        "run_dir": t.user_attrs.get("run_dir"),
        "host": t.user_attrs.get("host"),
        "device_group": t.user_attrs.get("device_group"),
        "retry_of": t.system_attrs.get("failed_trial"),
    }


def best_trials(study: "optuna.Study") -> list["optuna.trial.FrozenTrial"]:
    """Single objective: [the best]; several: the Pareto front, best on the first objective first."""
    complete = study.get_trials(deepcopy=False, states=(_state("COMPLETE"),))
    if not complete:
        return []
    if len(study.directions) == 1:
        return [study.best_trial]
    front = list(study.best_trials)
    sign = 1 if study.directions[0].name.lower() == "minimize" else -1
    return sorted(front, key=lambda t: sign * t.values[0])


def _state(name: str):
    import optuna

    return getattr(optuna.trial.TrialState, name)


def build_summary(study: "optuna.Study", sweep: "LoadedSweep", url: str, n_trials: int,
                  wall_time_s: float | None = None, epoch_budget: int | None = None) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    counts = state_counts(study, trials)
    starts = [t.datetime_start for t in trials if t.datetime_start]
    ends = [t.datetime_complete for t in trials if t.datetime_complete]
    study_wall = (max(ends) - min(starts)).total_seconds() if starts and ends else None
    best = best_trials(study)
    spent = epochs_spent(study, trials)
    summary: dict[str, Any] = {
        "study": sweep.study,
        "storage": redact(url),
        "objectives": [o.model_dump() for o in sweep.spec.objectives],
        "sampler": sweep.spec.sampler.name,
        "pruner": sweep.spec.pruner.name,
        "n_trials": n_trials,
        "done": done_count(counts),
        "epoch_budget": epoch_budget,
        "reached": done_count(counts) >= n_trials or (epoch_budget is not None and spent >= epoch_budget),
        "states": counts,
        "wall_time_s": round(wall_time_s, 1) if wall_time_s is not None else None,
        "study_wall_time_s": round(study_wall, 1) if study_wall is not None else None,
        "epochs_spent": spent,
        "best": None,
        "pareto_front": [],
        "study_dir": str(sweep.study_dir),
        "best_yaml": None,
        "plots": [],
        "dashboard": dashboard_command(url),
        "trials": [trial_record(t) for t in trials],
    }
    if best:
        summary["best"] = {**trial_record(best[0]), "value": _value(best[0].values[0])}
        if len(best) > 1 or len(study.directions) > 1:
            summary["pareto_front"] = [trial_record(t) for t in best]
    return summary


def best_hyp(sweep: "LoadedSweep", trial: "optuna.trial.FrozenTrial") -> tuple[dict, dict]:
    """(every hyperparameter of the winning trial at reference scale, sampled overrides)."""
    job = trial_job(sweep, trial.params, trial.number)
    hyp = resolve_hyp(job)
    overrides = {name.split(".", 1)[1]: v for name, v in trial.params.items() if name.startswith("overrides.")}
    return hyp, overrides


def write_best_yaml(sweep: "LoadedSweep", trial: "optuna.trial.FrozenTrial", path: Path) -> Path:
    hyp, overrides = best_hyp(sweep, trial)
    ref = sweep.base.spec.reference
    objectives = ", ".join(f"{o.metric} = {_fmt(v)} ({o.direction})"
                           for o, v in zip(sweep.spec.objectives, trial.values))
    sampled = [n.split(".", 1)[1] for n in trial.params if n.startswith("hyp.")]
    lines = [
        f"# Best hyperparameters of sweep study '{sweep.study}': trial {trial.number}, {objectives}.",
        f"# Written by `yolo-orch sweep` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC from {sweep.path.name}.",
        f"# Reference scale (reference: devices {ref.devices}, batch {ref.batch}, nbs {ref.nbs}): use it as",
        "# `hyp: <path to this file>` in a job; the scaler maps it to the job's target devices.",
        f"# Sampled by the sweep: {', '.join(sampled) or 'none'}; the rest comes from the base job "
        f"'{sweep.base.spec.name}'.",
    ]
    text = "\n".join(lines) + "\n" + yaml.safe_dump(hyp, sort_keys=False, default_flow_style=False)
    if overrides:
        block = yaml.safe_dump({"overrides": overrides}, sort_keys=False, default_flow_style=False)
        text += ("# Ultralytics overrides sampled by this sweep (not hyperparameters, so not part of a\n"
                 "# preset): copy them into the job's `overrides:` section.\n")
        text += "".join(f"# {line}\n" for line in block.splitlines())
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
    return path


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.5g}"
    return str(v)


def dashboard_command(url: str) -> str:
    return f"optuna-dashboard '{redact(url)}'"


def write_plots(study: "optuna.Study", folder: Path) -> tuple[list[str], list[str]]:
    """HTML plots (plotly) into `folder`; returns (written paths, notes on skipped plots)."""
    written, notes = [], []
    try:
        import optuna.visualization as vis
        import plotly  # noqa: F401
    except ImportError:
        return [], ["plots skipped: plotly is not installed (pip install plotly)"]
    folder.mkdir(parents=True, exist_ok=True)
    complete = study.get_trials(deepcopy=False, states=(_state("COMPLETE"),))
    multi = len(study.directions) > 1
    names = [o.get("metric", f"objective {i}") for i, o in enumerate(study.user_attrs.get("objectives") or [])]
    target_name = names[0] if names else "objective"

    def save(fig, name: str) -> None:
        path = folder / name
        fig.write_html(str(path), include_plotlyjs="directory", full_html=True)
        written.append(str(path))

    jobs: list[tuple[str, Any]] = []
    if multi:
        jobs.append(("history.html", lambda: vis.plot_optimization_history(
            study, target=lambda t: t.values[0], target_name=target_name)))
        jobs.append(("pareto.html", lambda: vis.plot_pareto_front(study, target_names=names or None)))
    else:
        jobs.append(("history.html", lambda: vis.plot_optimization_history(study, target_name=target_name)))
        jobs.append(("intermediate.html", lambda: vis.plot_intermediate_values(study)))
    if len(complete) >= 2:
        jobs.append(("importances.html", lambda: vis.plot_param_importances(
            study, evaluator=_importance_evaluator([t.values[0] for t in complete]),
            target=(lambda t: t.values[0]) if multi else None, target_name=target_name)))
    else:
        notes.append("importances.html skipped: needs at least 2 complete trials")
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # "no complete trials" and the like: shown in the table
    try:
        _save_all(jobs, save, notes)
    finally:
        optuna.logging.set_verbosity(verbosity)
    return written, notes


def _save_all(jobs, save, notes) -> None:
    for name, make in jobs:
        try:
            with warnings.catch_warnings():  # experimental-API and few-trials warnings: not the user's business
                warnings.simplefilter("ignore")
                save(make(), name)
        except Exception as exc:  # noqa: BLE001 - a plot never fails the sweep
            notes.append(f"{name} skipped: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")


def _importance_evaluator(values: list[float]):
    """fANOVA needs scikit-learn and values that differ (with every complete trial's objective equal it
    raises "zero total variance"); PED-ANOVA (numpy only) otherwise."""
    import importlib.util

    import optuna

    if importlib.util.find_spec("sklearn") is not None and len(set(values)) > 1:
        return optuna.importance.FanovaImportanceEvaluator(seed=0)
    return optuna.importance.PedAnovaImportanceEvaluator()


def write_report(study: "optuna.Study", sweep: "LoadedSweep", url: str, n_trials: int,
                 wall_time_s: float | None = None, epoch_budget: int | None = None) -> dict[str, Any]:
    folder = sweep.study_dir
    folder.mkdir(parents=True, exist_ok=True)
    summary = build_summary(study, sweep, url, n_trials, wall_time_s, epoch_budget)
    best = best_trials(study)
    if best:
        summary["best_yaml"] = str(write_best_yaml(sweep, best[0], folder / BEST_YAML))
        _, overrides = best_hyp(sweep, best[0])
        summary["best"]["overrides"] = overrides
    plots, notes = write_plots(study, folder)
    summary["plots"] = plots
    summary["notes"] = notes
    write_json_atomic(folder / SUMMARY_JSON, summary)
    return summary


# ----------------------------------------------------------------------------- rendering

def render(summary: dict[str, Any]) -> list["RenderableType"]:
    from rich.table import Table

    states = summary["states"]
    title = (f"Sweep {summary['study']}: {summary['done']}/{summary['n_trials']} trials done "
             f"({states['COMPLETE']} complete, {states['PRUNED']} pruned, {states['FAIL']} failed"
             + (f", {states['RUNNING']} running" if states["RUNNING"] else "")
             + (f", {states['WAITING']} waiting" if states["WAITING"] else "") + ")")
    head = Table(title=title, show_header=False, title_justify="left")
    head.add_column(style="bold cyan", no_wrap=True)
    head.add_column(overflow="fold")
    objectives = ", ".join(f"{o['metric']} ({o['direction']})" for o in summary["objectives"])
    best = summary["best"]
    rows = [
        ("objective", objectives),
        ("sampler / pruner", f"{summary['sampler']} / {summary['pruner']}"),
        ("storage", summary["storage"]),
    ]
    if best:
        rows += [
            ("best value", ", ".join(_fmt(v) for v in best["values"])),
            ("best trial", f"#{best['number']}  {best.get('run_dir') or ''}"),
            ("best params", "\n".join(f"{k} = {_fmt(v)}" for k, v in best["params"].items())),
        ]
        if summary["pareto_front"]:
            rows.append(("pareto front", ", ".join(f"#{t['number']}" for t in summary["pareto_front"])))
    else:
        rows.append(("best value", "- (no complete trial yet)"))
    rows += [
        ("trial states", ", ".join(f"{k.lower()} {v}" for k, v in states.items() if v) or "-"),
        ("epochs spent", str(summary["epochs_spent"])
         + (f" (budget {summary['epoch_budget']})" if summary.get("epoch_budget") else "")),
        ("wall time", _wall(summary)),
        ("best.yaml", summary.get("best_yaml") or "-"),
        ("plots", "\n".join(summary.get("plots") or []) or "-"),
        ("dashboard", summary["dashboard"]),
    ]
    for k, v in rows:
        head.add_row(k, v)

    trials = Table(title="Trials", header_style="bold", title_justify="left")
    for col in ("#", "state", "value", "epochs", "time", "params"):
        trials.add_column(col, overflow="fold", no_wrap=col != "params")
    for t in summary["trials"][-40:]:
        style = {"PRUNED": "yellow", "FAIL": "red", "RUNNING": "cyan"}.get(t["state"])
        value = ", ".join(_fmt(v) for v in t["values"]) if t["values"] else "-"
        params = "  ".join(f"{k.split('.', 1)[1]}={_fmt(v)}" for k, v in t["params"].items())
        retry = f" (retry of #{t['retry_of']})" if t.get("retry_of") is not None else ""
        trials.add_row(str(t["number"]), t["state"].lower() + retry, value, _fmt(t["epochs"]),
                       f"{t['duration_s']:.0f} s" if t["duration_s"] is not None else "-", params,
                       style=style)
    out: list = [head, trials]
    return out


def _wall(summary: dict) -> str:
    parts = []
    if summary.get("wall_time_s") is not None:
        parts.append(f"{summary['wall_time_s']:.0f} s this run")
    if summary.get("study_wall_time_s") is not None:
        parts.append(f"{summary['study_wall_time_s']:.0f} s first trial start to last trial end")
    return ", ".join(parts) or "-"
