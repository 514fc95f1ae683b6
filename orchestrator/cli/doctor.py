"""`yolo-orch doctor [--json]`: is this machine ready to train? Exit 0 when nothing fails.
`yolo-orch doctor --verify-plan JOB [--set K=V]`: the plan against the installed Ultralytics trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from orchestrator.cli.common import out, print_json

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def doctor_cmd(
    json_out: bool = typer.Option(False, "--json", help="Print the checks as JSON."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="The runs folder (disk space, registry)."),
    storage: Optional[str] = typer.Option(None, "--storage", help="Optuna storage URL to test (default: "
                                          "$YOLO_ORCH_STORAGE or $YOLO_ORCH_SWEEP_STORAGE)."),
    verify_plan: Optional[Path] = typer.Option(None, "--verify-plan", help="Instead: train a few steps of this job's "
                                               "planned arguments with the installed Ultralytics and compare what it "
                                               "applied with the plan (under a minute on a CPU)."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="With --verify-plan: override a job field."),
) -> None:
    """Check torch/torchvision, CUDA, stray GPU processes, XLA/TPU, W&B, disk, offline Ultralytics, storage."""
    from orchestrator.application.diagnostics import diagnose
    from orchestrator.doctor import as_json

    found = diagnose(runs_dir, storage, verify_plan, set_ or [])
    checks, title, failed = found.checks, found.title, found.failed
    if json_out:
        print_json({"ok": not failed, "checks": as_json(checks)})
    else:
        table = Table(title=title, header_style="bold", show_lines=True)
        table.add_column("check", style="bold cyan", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("detail", overflow="fold")
        table.add_column("fix", overflow="fold")
        for c in checks:
            table.add_row(c.name, f"[{STYLE[c.status]}]{c.status}[/]", c.detail, c.fix or "-")
        out.print(table)
        counts = {s: sum(c.status == s for c in checks) for s in STYLE}
        out.print(f"{counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail")
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)
