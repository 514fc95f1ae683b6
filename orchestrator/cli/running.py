"""The flows of the commands that train (`submit`, `train`, `resume`, `submit --resume-existing`): plan or
claim the run, train it under a progress bar, print its outcome and exit with its code. Shared here so
that no command module imports another's."""

from __future__ import annotations

import typer

from orchestrator.cli.common import human, print_json, run_exit_code


def plan_and_run(job, dry_run: bool, json_out: bool, node_rank: int | None = None, rdzv_endpoint: str | None = None,
                 rdzv_backend: str = "static", rdzv_id: str | None = None, run_id: str | None = None,
                 on_planned=lambda plan: None) -> None:
    """Plan a loaded job; print the plan (--dry-run) or train it and print the outcome (also `yolo-orch train`).
    `on_planned(plan)` runs once the plan is whole and, unless dry, can start here (train's --save)."""
    from orchestrator.cli.render import scaling_table, train_args_table
    from orchestrator.launch.torchrun import NodeLaunch
    from orchestrator.plan import make_plan

    plan = make_plan(job, node=NodeLaunch(node_rank, rdzv_endpoint, rdzv_backend, rdzv_id, require=not dry_run))
    if not dry_run:
        from orchestrator.runner import check_launchable

        check_launchable(plan)  # GPUs this machine lacks, a missing package: before anything is written
    on_planned(plan)
    console = human(json_out)
    if dry_run:
        from orchestrator.wandb_mode import describe_mode, resolve_mode

        if json_out:
            mode, why = resolve_mode(job.spec.wandb)
            print_json({**plan.as_json(), "wandb": {"mode": mode, "why": why}})
        else:
            console.print(scaling_table([plan.scaled], title=f"Plan for {job.spec.name}"))
            console.print(train_args_table(plan))
            console.print(describe_mode(job.spec.wandb), markup=False, highlight=False)
            console.print("[dim]dry run: no run was created, nothing trained[/]")
        return

    from orchestrator.cli.render import show_failure, summary_table, training_progress
    from orchestrator.runner import create_run, execute

    run_id, run_dir = create_run(plan, run_id=run_id)
    console.print(f"run [bold]{job.spec.name}/{run_id}[/] on {plan.devices.text} -> {run_dir}")
    with training_progress(console, job.spec.epochs) as on_event:
        outcome = execute(plan, run_id, run_dir, on_event=on_event)

    if json_out:
        print_json({"run_id": run_id, "run_dir": str(run_dir), "state": outcome.state,
                    "exit_code": outcome.exit_code, "note": outcome.note, "summary": outcome.summary})
    else:
        console.print(summary_table(job.spec.name, run_id, run_dir, plan.devices.text, outcome.summary, outcome.state))
    if outcome.state == "killed":
        last = outcome.last_checkpoint
        console.print(f"stopped. last checkpoint: {last}" if last else "stopped before the first checkpoint.")
    elif outcome.state in ("failed", "stalled"):
        show_failure(console, outcome)
    raise typer.Exit(run_exit_code(outcome.state))


def resume_and_report(row: dict, devices: str | None, json_out: bool, restart_ok: bool = False,
                      launch_opts: dict | None = None) -> None:
    """Resume the registry row's run with a progress bar, print its outcome, exit with its code
    (also `submit --run-id ID --resume-existing`, a requeued Slurm job: `restart_ok`, a run that
    stopped before its first checkpoint starts again)."""
    from orchestrator.runner import close_recorded_run, prepare_resume_row, resume_run
    from orchestrator.cli.render import show_failure, summary_table, training_progress

    closed = close_recorded_run(row)
    if closed is not None:
        if json_out:
            print_json({"run_id": row["id"], "run_dir": row["run_dir"], "state": closed.state, "exit_code": 0,
                        "summary": closed.summary, "note": closed.note})
        else:
            human(json_out).print(f"{row['job']}/{row['id']}: {closed.note}", markup=False, highlight=False)
        return
    info = prepare_resume_row(row, devices, restart_ok, launch_opts)
    console = human(json_out)
    plan = info["plan"]
    console.print(f"resuming [bold]{row['job']}/{row['id']}[/]: {info['note']} -> {row['run_dir']}")
    with training_progress(console, int(plan["train_args"]["epochs"]), info["from_epoch"] - 1) as on_event:
        outcome = resume_run(row, devices, on_event=on_event, prepared=info)
    if json_out:
        print_json({"run_id": row["id"], "run_dir": row["run_dir"], "state": outcome.state,
                    "exit_code": outcome.exit_code, "resumed_from_epoch": info["from_epoch"],
                    "devices": plan["devices"], "replanned": info["replanned"], "summary": outcome.summary,
                    "oom_recoveries": outcome.oom_recoveries, "note": outcome.note})
    else:
        console.print(summary_table(row["job"], row["id"], row["run_dir"], plan["devices"], outcome.summary,
                                    outcome.state))
    if outcome.state in ("failed", "stalled"):
        show_failure(console, outcome)
    raise typer.Exit(run_exit_code(outcome.state))


def continue_existing(row: dict, devices: str | None, json_out: bool, launch_opts: dict | None = None) -> None:
    """--resume-existing found the run: resume it, or say it is already finished (exit 0)."""
    if row["state"] == "finished":
        if json_out:
            print_json({"run_id": row["id"], "run_dir": row["run_dir"], "state": "finished", "exit_code": 0,
                        "note": "already finished: nothing to do"})
        else:
            human(json_out).print(f"run {row['job']}/{row['id']} already finished: nothing to do")
        return
    resume_and_report(row, devices, json_out, restart_ok=True, launch_opts=launch_opts)
