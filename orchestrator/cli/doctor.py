"""`yolo-orch doctor [--json]`: is this machine ready to train? Exit 0 when nothing fails."""

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
) -> None:
    """Check torch/torchvision, CUDA, stray GPU processes, XLA/TPU, W&B, disk, offline Ultralytics, storage."""
    from orchestrator.doctor import as_json, run_checks

    checks = run_checks(runs_dir, storage=storage)
    failed = any(c.status == "fail" for c in checks)
    if json_out:
        print_json({"ok": not failed, "checks": as_json(checks)})
    else:
        table = Table(title="yolo-orch doctor", header_style="bold", show_lines=True)
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
