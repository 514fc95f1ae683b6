#!/usr/bin/env python3
"""Train a yolo-orch job on a Kaggle TPU, end to end:

    scripts/kaggle_tpu_launch.py JOB.yaml [--owner USER] [--wheels-dataset OWNER/SLUG]
        [--data-dataset OWNER/SLUG] [--machine-shape TpuV5E8] [--devices tpu:8]
        [--session-hours 9] [--margin-minutes 20] [--internet] [--poll 60] [--runs-dir runs]
        [--run-id ID --resume-from OWNER/KERNEL]   # continue an interrupted launch

builds the kernel folder, pushes it, polls its status with a progress display, pulls the
outputs into runs/<job>/<run id>/ (registered in runs/registry.db), and while the job's epochs
are not done (a session stopped before Kaggle's limit) pushes the next session, which resumes
from the previous one's output. Needs the official `kaggle` CLI, authenticated, and the wheels
dataset uploaded once (`yolo-orch kaggle wheels`). See docs/kaggle.md.

Exit: 0 finished, 1 a session failed, 2 bad input / kaggle CLI missing or not authenticated,
130 interrupted (the kernel may still run; the printed command continues).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kaggle_tpu_launch.py", description=__doc__.split("\n\n")[0])
    p.add_argument("job", type=Path, help="job spec YAML")
    p.add_argument("--set", dest="sets", action="append", default=[], help="override a job field KEY=VALUE")
    p.add_argument("--owner")
    p.add_argument("--wheels-dataset")
    p.add_argument("--data-dataset")
    p.add_argument("--machine-shape")
    p.add_argument("--devices")
    p.add_argument("--kernel", help="kernel slug (default yolo-orch-<job name>)")
    p.add_argument("--session-hours", type=float)
    p.add_argument("--margin-minutes", type=float)
    p.add_argument("--internet", dest="enable_internet", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--max-boxes", type=int, help="XLA per-image box limit (default: the job's xla.max_boxes)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="bf16 autocast (default: the job's xla.bf16, else on for a TPU)")
    p.add_argument("--runs-dir", type=Path)
    p.add_argument("--run-id", help="continue this run (with --resume-from)")
    p.add_argument("--resume-from", help="OWNER/KERNEL of the last finished session")
    p.add_argument("--poll", type=float, default=60.0, help="seconds between status checks (default 60)")
    p.add_argument("--max-sessions", type=int, default=20)
    p.add_argument("--session-timeout-hours", type=float, help="give up on a session after this long")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    ns = parse(argv)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from orchestrator.kaggle import tool
    from orchestrator.kaggle.build import BuildOptions
    from orchestrator.kaggle.loop import LaunchOptions, launch
    from orchestrator.spec.errors import SpecError
    from orchestrator.spec.loader import load_job

    console = Console(stderr=True)
    try:
        tool.executable()
        tool.require_credentials()
        job = load_job(ns.job, sets=ns.sets)
    except tool.KaggleCliError as exc:
        console.print(str(exc), markup=False, highlight=False)
        return 2
    except SpecError as exc:
        for line in exc.problems:
            console.print(line, markup=False, highlight=False)
        return 2
    # every build option of `yolo-orch kaggle build` has a flag of the same name here
    build = BuildOptions(**{f.name: getattr(ns, f.name) for f in fields(BuildOptions) if hasattr(ns, f.name)})
    opts = LaunchOptions(
        build=build,
        runs_dir=ns.runs_dir, poll_s=ns.poll, max_sessions=ns.max_sessions,
        session_timeout_h=ns.session_timeout_hours,
    )
    epochs = job.spec.epochs
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task(f"{job.spec.name} epochs", total=epochs, status="building")
        shown: set[str] = set()

        def on_event(e: dict) -> None:
            kind, s = e["event"], e.get("session")
            if kind == "built":
                for w in e.get("warnings", []):
                    if w not in shown:
                        shown.add(w)
                        progress.console.print(f"[yellow]warning:[/] {w}", highlight=False)
                progress.update(task, status=f"session {s}: built {e['kernel']}")
            elif kind == "pushed":
                progress.console.print(f"session {s}: pushed {e['kernel']}" + (f" -> {e['url']}" if e.get("url") else ""),
                                       highlight=False, markup=False)
                progress.update(task, status=f"session {s}: pushed")
            elif kind == "status":
                progress.update(task, status=f"session {s}: {e['state']} ({e['elapsed'] / 60:.0f} min)")
            elif kind == "pulled":
                progress.update(task, status=f"session {s}: pulled {len(e['files'])} files")
            elif kind == "session":
                r = e.get("resume") or {}
                progress.update(task, completed=int(r.get("epochs_done") or 0),
                                status=f"session {s}: {r.get('state', e['status'])}")
                progress.console.print(f"session {s} ({e['kernel']}): {e['status']}, "
                                       f"{r.get('epochs_done', '?')}/{epochs} epochs, {r.get('state', '-')}",
                                       highlight=False, markup=False)

        outcome = launch(job, opts, on_event=on_event)
    print(f"run {job.spec.name}/{outcome.run_id}: {outcome.state} -> {outcome.run_dir}")
    if outcome.message:
        print(outcome.message)
    metrics = (outcome.resume or {}).get("metrics") or {}
    for key in ("metrics/mAP50(B)", "metrics/mAP50-95(B)"):
        if key in metrics:
            print(f"  {key} {metrics[key]:.4f}")
    return {"finished": 0, "killed": 130}.get(outcome.state, 1)


if __name__ == "__main__":
    sys.exit(main())
