"""What `ui` does, without a terminal: check the registry and the address it will serve (each refusal one
line), then serve the dashboard (orchestrator/ui/) until interrupted; where it listens reaches the command
through `on_listening(url)`."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from orchestrator.errors import UserError


@dataclass(frozen=True)
class Dashboard:
    registry: Path
    host: str  # without the brackets of an IPv6 URL
    port: int

    @property
    def loopback(self) -> bool:
        """Only this machine can reach it (else anyone who reaches the address sees every run)."""
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def prepare_dashboard(runs_dir: Path, registry: Path | None, host: str, port: int) -> Dashboard:
    """The registry to show and the address, checked: a port out of range, no registry, a registry that is
    another program's file or damaged, an address that cannot be listened on."""
    from orchestrator.registry import registry_path
    from orchestrator.ui.store import Store

    if not 0 <= port <= 65535:
        raise UserError(f"--port: {port} is not a TCP port (0-65535)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1], as in a URL
    path = registry_path(registry if registry is not None else runs_dir)
    if not path.is_file():
        raise UserError(f"--runs-dir/--registry: no registry at {path}: no runs there yet")
    try:
        Store(path).check()
    except OSError as exc:
        raise UserError(f"--runs-dir/--registry: {exc}") from None
    _check_port(host, port)
    return Dashboard(path, host, port)


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


def serve(board: Dashboard, on_listening: Callable[[str], None]) -> None:
    """The dashboard over the registry and the runs folder beside it (sweeps/), until KeyboardInterrupt."""
    try:
        import plotly  # noqa: F401 - its plotly.min.js draws the charts
        import uvicorn
    except ImportError as exc:
        raise UserError(f"yolo-orch ui needs {exc.name}: pip install 'yolo-orch[ui]'") from None

    from orchestrator.ui.server import LOOPBACK_NAMES, create_app
    from orchestrator.ui.store import Store

    app = create_app(Store(board.registry), board.registry.parent.resolve(), LOOPBACK_NAMES if board.loopback else None)
    server = uvicorn.Server(uvicorn.Config(app, host=board.host, port=board.port, log_level="warning",
                                           access_log=False))
    original = server.startup

    async def startup(sockets=None):  # say where, once the socket is bound (port 0 picks one)
        await original(sockets)
        for s in server.servers:
            for sock in s.sockets:
                address, bound = sock.getsockname()[:2]
                on_listening(f"http://{f'[{address}]' if ':' in address else address}:{bound}/")

    server.startup = startup
    server.run()
