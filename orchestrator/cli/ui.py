"""`yolo-orch ui [--runs-dir DIR | --registry FILE] [--host 127.0.0.1] [--port 8765]`: the local dashboard
over the run registry (orchestrator/ui/), read-only, until Ctrl-C."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import err
from orchestrator.errors import UserError


def ui_cmd(
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="The runs folder whose registry.db to show."),
    registry: Optional[Path] = typer.Option(None, "--registry", help="Registry file (default: RUNS_DIR/registry.db "
                                            "or $YOLO_ORCH_REGISTRY)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (another than loopback: anyone who "
                             "reaches it sees the runs)."),
    port: int = typer.Option(8765, "--port", help="Port to listen on (0: any free one)."),
) -> None:
    """Browse runs, their curves (live while training), plans, comparisons and sweeps in a web browser."""
    from orchestrator.registry import registry_path

    if not 0 <= port <= 65535:
        raise UserError(f"--port: {port} is not a TCP port (0-65535)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1], as in a URL
    path = registry_path(registry if registry is not None else runs_dir)
    if not path.is_file():
        raise UserError(f"--runs-dir/--registry: no registry at {path}: no runs there yet")
    _check_registry(path)
    _check_port(host, port)
    if not _loopback(host):
        err.print(f"warning: listening on {host}: anyone who can reach this machine sees every run, its logs and "
                  "files (the dashboard has no login); on a cluster prefer an SSH tunnel to 127.0.0.1",
                  markup=False, highlight=False, soft_wrap=True)
    try:
        serve(path, path.parent, host, port)  # the runs folder: the registry and sweeps/ beside it
    except KeyboardInterrupt:  # Ctrl-C is how a dashboard is stopped: a clean end, not an interruption
        err.print("yolo-orch ui: stopped", markup=False, highlight=False)


def serve(registry: Path, runs_root: Path, host: str, port: int) -> None:
    try:
        import plotly  # noqa: F401 - its plotly.min.js draws the charts
        import uvicorn
    except ImportError as exc:
        raise UserError(f"yolo-orch ui needs {exc.name}: pip install 'yolo-orch[ui]'") from None

    from orchestrator.ui.server import LOOPBACK_NAMES, create_app
    from orchestrator.ui.store import Store

    app = create_app(Store(registry), Path(runs_root).resolve(), LOOPBACK_NAMES if _loopback(host) else None)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    original = server.startup

    async def startup(sockets=None):  # say where, once the socket is bound (port 0 picks one)
        await original(sockets)
        for s in server.servers:
            for sock in s.sockets:
                address, bound = sock.getsockname()[:2]
                address = f"[{address}]" if ":" in address else address  # an IPv6 address, as a URL has it
                err.print(f"yolo-orch ui: http://{address}:{bound}/  (registry {registry}; Ctrl-C stops it)",
                          markup=False, highlight=False, soft_wrap=True)

    server.startup = startup
    server.run()


def _check_registry(path: Path) -> None:
    """A registry.db that is text, random bytes or another program's database: refused at start."""
    from orchestrator.ui.store import Store

    try:
        Store(path).check()
    except OSError as exc:
        raise UserError(f"--runs-dir/--registry: {exc}") from None


def _check_port(host: str, port: int) -> None:
    """The address can be listened on (else uvicorn's own error, exit 3): said in one line."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds it
            s.bind((host, port))
    except OSError as exc:
        raise UserError(f"--host/--port: cannot listen on {host} port {port}: {exc.strerror or exc}") from None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(app: typer.Typer) -> None:
    app.command("ui")(ui_cmd)
