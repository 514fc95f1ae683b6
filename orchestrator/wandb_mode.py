"""Decide the W&B mode without importing wandb (light CLI path)."""

from __future__ import annotations

import importlib.util
import netrc
import os
from pathlib import Path

from orchestrator.jobspec.job import Wandb


def api_key_configured() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        rc = netrc.netrc(os.environ.get("NETRC", Path.home() / ".netrc"))
        host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0]
        return rc.authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def resolve_mode(cfg: Wandb) -> tuple[str, str]:
    """(mode, why). Offline unless the user configured a key or asked for online."""
    if os.environ.get("WANDB_MODE") in ("disabled", "offline", "online") and cfg.mode is None:
        return os.environ["WANDB_MODE"], "from WANDB_MODE"
    if importlib.util.find_spec("wandb") is None:
        return "disabled", "wandb is not installed"
    if cfg.mode is not None:
        return cfg.mode, "set in the job"
    if api_key_configured():
        return "online", "an API key is configured"
    return "offline", "no API key configured"


def describe_mode(cfg: Wandb) -> str:
    """One line for `plan` and `--dry-run`: the mode a run will start with, and the fallback."""
    mode, why = resolve_mode(cfg)
    line = f"W&B: {mode} ({why})"
    if mode == "online":
        line += "; if the W&B server cannot be reached when the run starts, it logs offline instead"
    elif mode == "offline":
        line += "; `wandb sync` uploads a run later"
    return line
