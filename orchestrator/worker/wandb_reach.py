"""Can online W&B be reached from here? A bounded TCP probe of the W&B server, no wandb import (and the
same probe for an MLflow tracking server).

Used only where the user configured online logging (a key, WANDB_MODE=online or `wandb.mode: online`):
the worker checks before `wandb.init` and falls back to offline (a run is never lost to W&B), and
`doctor` reports it. Nothing else in the tool touches the network."""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 5.0


def server_address() -> tuple[str, int]:
    """(host, port) of the W&B server this process would talk to (WANDB_BASE_URL or the cloud)."""
    url = urlsplit(os.environ.get("WANDB_BASE_URL") or DEFAULT_BASE_URL)
    port = url.port or (80 if url.scheme == "http" else 443)
    return url.hostname or "api.wandb.ai", port


def unreachable_reason(timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to the W&B server opens within `timeout_s`; else why not."""
    return tcp_unreachable(*server_address(), timeout_s)


def tcp_unreachable(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to host:port opens within `timeout_s`; else why not (W&B's server here,
    an MLflow tracking server in worker/mlflow_logger.py). The name lookup runs in a thread: getaddrinfo
    itself has no timeout and can hang on a node without DNS."""
    result: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                result.append(None)
        except OSError as exc:
            result.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(timeout_s + 0.5)
    if not result:
        return f"no answer from {host}:{port} within {timeout_s:.0f} s"
    return None if result[0] is None else f"{host}:{port} unreachable ({result[0]})"
