"""`yolo-orch resume RUN [--devices SPEC] [--json]`: continue a killed or failed run from its
weights/last.pt at the interrupted epoch, in the same run directory and registry row."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import check_devices_flag, human
from orchestrator.cli.options import JSON_OUT, REGISTRY, RUNS_DIR


def resume_cmd(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one (see `yolo-orch runs`)."),
    devices: Optional[str] = typer.Option(None, "--devices", "-d", help="Continue on these devices; a different "
                                          "device count is re-planned through the scaler."),
    json_out: bool = JSON_OUT,
    runs_dir: Path = RUNS_DIR,
    registry: Optional[Path] = REGISTRY,
) -> None:
    """Resume a killed or failed run at the epoch it reached (same resolved job and run directory)."""
    from orchestrator.application.training import resume_named
    from orchestrator.cli.running import progress_on, render_resumed

    check_devices_flag(devices)
    render_resumed(resume_named(runs_dir, registry, run, devices, progress_on(human(json_out))), json_out)


def register(app: typer.Typer) -> None:
    app.command("resume")(resume_cmd)
