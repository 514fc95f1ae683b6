"""Rich renderings of plans and run summaries."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.table import Table

from orchestrator.plan import Plan
from orchestrator.tasks import LOSSES, headline, task_of_keys
from orchestrator.scaling.types import ScaleResult


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "-" if value is None else str(value)


# the effective values a plan shows without --explain: how the batch is split and what a step is
BRIEF_EFFECTIVE = ("world_size", "batch_per_device", "accumulate", "images_per_step", "optimizer_steps_per_epoch",
                   "weight_decay")


def scaling_table(results: list[ScaleResult], title: str = "Plan", explain: bool = False) -> Table:
    """One column per target: passed arguments and effective values (all of them with `explain`)."""
    table = Table(title=title, show_lines=False, header_style="bold")
    table.add_column("", style="bold cyan", no_wrap=True)
    for r in results:
        table.add_column(f"{r.devices}\n({r.policy})", overflow="fold")
    passed_keys = list(dict.fromkeys(k for r in results for k in r.passed))
    effective_keys = [k for k in dict.fromkeys(k for r in results for k in r.effective)
                      if explain or k in BRIEF_EFFECTIVE]
    table.add_row("[bold]passed[/]", *["" for _ in results])
    for key in passed_keys:
        table.add_row(f"  {key}", *[_fmt(r.passed.get(key)) for r in results])
    table.add_section()
    table.add_row("[bold]effective[/]", *["" for _ in results])
    for key in effective_keys:
        table.add_row(f"  {key}", *[_fmt(r.effective.get(key)) for r in results])
    return table


def why_lines(results: list[ScaleResult], explain: bool = False) -> list[str]:
    """Per target: one line per changed value, each warning, and with `explain` the mechanisms behind them.
    What several targets share is said once: that nothing changed anywhere (and why), and a warning's
    explanation already given for another target (only its first part, and where it was said)."""
    lines = []
    all_kept = len(results) > 1 and not any(r.reasons for r in results)
    if all_kept:
        lines.append(f"nothing changed on any target: {kept_reason(results[0])}")
    said: dict[str, str] = {}  # a warning's explanation -> the target it was said for
    for r in results:
        own = [f"  ! {said_once(line, r.devices, said)}" for line in r.warnings]
        own += [f"  . {line}" for line in r.details] if explain else []
        if all_kept and not own:
            continue
        lines.append(f"why ({r.devices}, {r.policy}):")
        if r.reasons:
            lines += [f"  {line}" for line in r.reasons]
        elif not all_kept:
            lines.append(f"  nothing changed: {kept_reason(r)}")
        lines += own
    if not explain and any(r.details for r in results):
        lines.append("(--explain: every effective value and the mechanisms behind each reason)")
    return lines


def job_warning_lines(plan: Plan) -> list[str]:
    """The job's own warnings (its data, its hyperparameters), the same for every target: said once."""
    return ["the job:", *[f"  ! {line}" for line in plan.job_warnings]] if plan.job_warnings else []


def kept_reason(r: ScaleResult) -> str:
    """Why a target takes the reference's values as they are: its images per optimizer step are the same."""
    eff = r.effective
    split = f" (split {eff['batch_per_device']} per device)" if eff.get("world_size", 1) > 1 else ""
    return (f"the total batch {r.passed.get('batch')}{split} makes {eff.get('images_per_step')} images per optimizer "
            "step, as the reference did, so Ultralytics applies every hyperparameter as it was tuned")


def said_once(line: str, devices: str, said: dict[str, str]) -> str:
    """`head: explanation`, or `head (the note for DEVICES above)` when another target's line gave that explanation."""
    head, sep, explanation = line.partition(": ")
    if not sep:
        return line
    if explanation in said:
        return f"{head} (the note for {said[explanation]} above)"
    said[explanation] = devices
    return line


def train_args_table(plan: Plan) -> Table:
    where = {"slurm": " on Slurm", "ray": " on Ray"}.get(plan.job.spec.target.launcher or "", "")
    table = Table(title=f"Ultralytics train arguments ({plan.launcher} launcher{where}, {plan.devices.text})",
                  header_style="bold")
    table.add_column("argument", style="cyan", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("changed by", style="dim")
    for key, value in plan.train_args.items():
        source = "scaler" if key in plan.scaled.passed and plan.scaled.passed[key] != plan.hyp.get(key) else ""
        if key in plan.job.spec.overrides:
            source = "overrides"
        table.add_row(key, _fmt(value), source)
    return table


def summary_table(job: str, outcome, devices: str) -> Table:
    """The run's outcome; a killed or stalled run has no summary.json, so its epochs and weights are
    read from the run directory (2 of 6 epochs done and a best.pt are worth saying)."""
    summary = outcome.summary or {}
    table = Table(title=f"Run {job}/{outcome.run_id}: {outcome.state}", show_header=False)
    table.add_column(style="bold cyan")
    table.add_column()
    metrics = summary.get("metrics", {})
    done = summary.get("epochs_completed", outcome.epochs_done)
    epochs = summary.get("epochs", outcome.epochs)
    rows = [
        ("devices", devices),
        ("epochs", f"{_fmt(done)}/{_fmt(epochs)}"),
        *((label, _fmt(value)) for label, value in headline(metrics)),
        ("wall time", f"{summary.get('wall_time_s', 0):.1f} s" if summary else "-"),
        ("best weights", _fmt(summary.get("best") or outcome.best_weights)),
        ("run dir", str(outcome.run_dir)),
    ]
    for step in (summary or {}).get("oom_recoveries") or []:
        from orchestrator.plan.replan import describe_oom_step
        from orchestrator.rundir import OomStep

        rows.append(("oom recovery", describe_oom_step(OomStep(**step))))
    rows += export_rows(summary) + tracker_rows(summary)
    for k, v in rows:
        table.add_row(k, v)
    return table


def export_rows(summary: dict | None) -> list[tuple[str, str]]:
    """One row per export the run made or tried: its file and difference from best.pt, or why it failed."""
    from orchestrator.exports import describe

    return [(f"export {record['format']}", describe(record).split(": ", 1)[1])
            for record in ((summary or {}).get("exports") or {}).values()]


TRACKERS = {"mlflow": "MLflow", "tensorboard": "TensorBoard", "wandb": "W&B"}


def tracker_rows(summary: dict | None) -> list[tuple[str, str]]:
    """One row per warning of a tracker that could not start, fell back or stopped during the run."""
    return [(TRACKERS[name], str(warning)) for name in TRACKERS
            for warning in (((summary or {}).get(name) or {}).get("warnings") or [])]


def show_failure(console, outcome) -> None:
    """One line: the cause, how to continue, and where the whole log is (not a traceback tail)."""
    what = "training stalled" if outcome.state == "stalled" else "training failed"
    console.print(f"{what}: {outcome.note or 'see the log'} (full log: {outcome.run_dir / 'train.log'})",
                  style="red", markup=False, highlight=False, soft_wrap=True)


@contextmanager
def training_progress(console, total: int, completed: int = 0) -> Iterator[Callable[[dict], None]]:
    """The epoch bar of `submit` and `resume`; yields the `on_event` that drives it from the run's
    events: moves within an epoch (`progress`), shows each epoch's metrics, prints OOM restarts and
    warnings above the bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[metrics]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
        refresh_per_second=1,  # the training child owns the CPU; a 10 Hz redraw costs it ~1% on 2 cores
    ) as progress:
        task = progress.add_task("epochs", total=total, completed=completed, metrics="")

        def on_event(event: dict) -> None:
            kind = event.get("event")
            if kind == "train_start":
                progress.update(task, total=event["epochs"], completed=event.get("start_epoch", 0))
            elif kind == "progress" and event.get("batches"):  # within an epoch
                progress.update(task, completed=event["epoch"] - 1 + min(event["batch"] / event["batches"], 1.0))
            elif kind == "epoch":
                m = event.get("metrics") or {}
                label, value = headline(m)[-1]
                loss = f"train/{LOSSES[task_of_keys(m)][0]}"  # box_loss; classify's loss, ce_loss, dlog_loss
                text = f"{label} {value or 0:.3f}  {loss.split('/')[1].replace('_', ' ')} {m.get(loss) or 0:.3f}"
                progress.update(task, completed=event["epoch"], metrics=text)
            elif kind in ("oom_restart", "warning"):  # OOM recovery (docs/operations.md), W&B fallback
                progress.console.print(event.get("message"), style="yellow", markup=False, highlight=False)

        yield on_event
