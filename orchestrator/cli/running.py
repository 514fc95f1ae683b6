"""How the commands that train (`submit`, `train`, `resume`, `submit --resume-existing`) show their work:
the progress of a training (application/training.py reports it through `progress_on`), and the outcome it
returns, printed as a table or JSON, ending the command with the run's exit code."""

from __future__ import annotations

from contextlib import contextmanager

import typer
from rich.markup import escape

from orchestrator.application.training import Progress, Resumed, RunStart, Submitted
from orchestrator.cli.common import human, print_json, run_exit_code
from orchestrator.errors import EXIT_EXPORT_FAILED
from orchestrator.registry import Run


def progress_on(console) -> Progress:
    """The run's header line, then its epoch bar (render.training_progress)."""
    from orchestrator.cli.render import training_progress

    @contextmanager
    def progress(start: RunStart):
        console.print(f"{start.verb} [bold]{escape(start.name)}[/]{escape(start.detail)}")
        with training_progress(console, start.epochs, start.done) as on_event:
            yield on_event

    return progress


def render_submitted(done: Submitted, job, json_out: bool) -> None:
    """A dry run's plan, a trained run, or a resumed one; exits with the run's code."""
    if done.already_finished is not None:
        return render_already_finished(done.already_finished, json_out)
    if done.resumed is not None:
        return render_resumed(done.resumed, json_out)
    if done.outcome is None:
        return render_plan(done.plan, job, json_out)
    render_run(done, job, json_out)


def render_plan(plan, job, json_out: bool) -> None:
    from orchestrator.cli.render import job_warning_lines, scaling_table, train_args_table, why_lines
    from orchestrator.tracking import describe, runs_root
    from orchestrator.wandb_mode import describe_mode, resolve_mode

    trackers = describe(job.spec, runs_root(job.spec))
    if json_out:
        mode, why = resolve_mode(job.spec.wandb)
        print_json({**plan.as_json(), "wandb": {"mode": mode, "why": why}, **({"trackers": trackers} if trackers else {})})
        return
    console = human(json_out)
    console.print(scaling_table([plan.scaled], title=f"Plan for {job.spec.name}"))
    for line in why_lines([plan.scaled]) + job_warning_lines(plan):
        console.print(line, markup=False, highlight=False)
    console.print(train_args_table(plan))
    for line in [describe_mode(job.spec.wandb), *trackers]:
        console.print(line, markup=False, highlight=False)
    console.print("[dim]dry run: no run was created, nothing trained[/]")


def render_run(done: Submitted, job, json_out: bool) -> None:
    from orchestrator.cli.render import show_failure, summary_table

    outcome, console = done.outcome, human(json_out)
    if json_out:
        print_json({"run_id": outcome.run_id, "run_dir": str(outcome.run_dir), "state": outcome.state,
                    "exit_code": outcome.exit_code, "note": outcome.note, "summary": outcome.summary})
    else:
        console.print(summary_table(job.spec.name, outcome, done.plan.devices.text))
    if outcome.state == "killed":
        last = outcome.last_checkpoint
        console.print(f"stopped. last checkpoint: {last}" if last else "stopped before the first checkpoint.")
    elif outcome.state in ("failed", "stalled"):
        show_failure(console, outcome)
    show_failed_exports(outcome)
    raise typer.Exit(run_exit_code(outcome.state, outcome.exit_code))


def render_resumed(resumed: Resumed, json_out: bool) -> None:
    from orchestrator.cli.render import export_rows, show_failure, summary_table, tracker_rows

    row, outcome, prepared, console = resumed.row, resumed.outcome, resumed.prepared, human(json_out)
    if prepared is None:  # closed as finished, as finishing closes a run: every epoch was recorded
        if json_out:
            print_json({"run_id": row.id, "run_dir": row.run_dir, "state": outcome.state,
                        "exit_code": outcome.exit_code, "summary": outcome.summary, "note": outcome.note})
        else:
            console.print(f"{row.label}: {outcome.note}", markup=False, highlight=False)
            for label, text in export_rows(outcome.summary) + tracker_rows(outcome.summary):
                console.print(f"  {label}: {text}", markup=False, highlight=False)
        show_failed_exports(outcome)
        raise typer.Exit(run_exit_code(outcome.state, outcome.exit_code))
    plan = prepared.plan
    if json_out:
        print_json({"run_id": row.id, "run_dir": row.run_dir, "state": outcome.state,
                    "exit_code": outcome.exit_code, "resumed_from_epoch": prepared.from_epoch, "resume_note": prepared.note,
                    "devices": plan.devices, "replanned": prepared.replanned, "summary": outcome.summary,
                    "oom_recoveries": [s.to_dict() for s in outcome.oom_recoveries], "note": outcome.note})
    else:
        console.print(summary_table(row.job, outcome, plan.devices))
    if outcome.state in ("failed", "stalled"):
        show_failure(console, outcome)
    show_failed_exports(outcome)
    raise typer.Exit(run_exit_code(outcome.state, outcome.exit_code))


def show_failed_exports(outcome) -> None:
    """On stderr, whatever the output: the exports that failed, and that the weights are there to export again."""
    from orchestrator.cli.common import err
    from orchestrator.exports import failed_exports

    failed = failed_exports(outcome.summary)
    if failed:
        err.print(f"the run finished, but its export to {', '.join(failed)} failed (exit {EXIT_EXPORT_FAILED}); its "
                  f"weights are kept: `yolo-orch export {outcome.run_id} -f {failed[0]}` tries again", markup=False,
                  highlight=False, soft_wrap=True)


def render_already_finished(row: Run, json_out: bool) -> None:
    """--resume-existing found the run finished: nothing to do (exit 0)."""
    if json_out:
        print_json({"run_id": row.id, "run_dir": row.run_dir, "state": "finished", "exit_code": 0,
                    "note": "already finished: nothing to do"})
    else:
        human(json_out).print(f"run {row.label} already finished: nothing to do")
