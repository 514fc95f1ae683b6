"""`yolo-orch ui [--runs-dir DIR | --registry FILE] [--host 127.0.0.1] [--port 8765]`: the local dashboard
over the run registry (orchestrator/ui/), read-only, until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import err


def ui_cmd(
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="The runs folder whose registry.db to show."),
    registry: Optional[Path] = typer.Option(None, "--registry", help="Registry file (default: RUNS_DIR/registry.db "
                                            "or $YOLO_ORCH_REGISTRY)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (another than loopback: anyone who "
                             "reaches it sees the runs)."),
    port: int = typer.Option(8765, "--port", help="Port to listen on (0: any free one)."),
) -> None:
    """Browse runs, their curves (live while training), plans, comparisons and sweeps in a web browser."""
    from orchestrator.application.dashboard import prepare_dashboard, serve

    board = prepare_dashboard(runs_dir, registry, host, port)
    if not board.loopback:
        err.print(f"warning: listening on {board.host}: anyone who can reach this machine sees every run, its logs "
                  "and files (the dashboard has no login); on a cluster prefer an SSH tunnel to 127.0.0.1",
                  markup=False, highlight=False, soft_wrap=True)

    def listening(url: str) -> None:
        err.print(f"yolo-orch ui: {url}  (registry {board.registry}; Ctrl-C stops it)", markup=False,
                  highlight=False, soft_wrap=True)

    try:
        serve(board, listening)
    except KeyboardInterrupt:  # Ctrl-C is how a dashboard is stopped: a clean end, not an interruption
        err.print("yolo-orch ui: stopped", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)
