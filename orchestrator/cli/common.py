"""Shared CLI plumbing: consoles, error exits, JSON output."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from rich.console import Console

from orchestrator.errors import EXIT_BAD_INPUT, EXIT_EXPORT_FAILED, EXIT_FAILED, RUN_EXIT_CODES

# Human output goes to stderr when --json owns stdout.
out = Console()
err = Console(stderr=True)

MAX_PROBLEM_LINES = 50  # a file with 30,000 unknown keys gets a screen, not 30,000 lines


def run_exit_code(state: str, exit_code: int | None = None) -> int:
    """The command's exit code for a run that ended in `state`; a finished run's own code when it has one
    (EXIT_EXPORT_FAILED: trained, but an export it asked for failed)."""
    if state == "finished" and exit_code == EXIT_EXPORT_FAILED:
        return EXIT_EXPORT_FAILED
    return RUN_EXIT_CODES.get(state, EXIT_FAILED)


def fail(problems: list[str], code: int = EXIT_BAD_INPUT) -> NoReturn:
    shown = problems if len(problems) <= MAX_PROBLEM_LINES else problems[:MAX_PROBLEM_LINES - 1]
    for line in shown:
        err.print(line, markup=False, highlight=False, soft_wrap=True)
    if len(shown) < len(problems):
        err.print(f"... and {len(problems) - len(shown)} more problems of the same kinds", markup=False,
                  highlight=False, soft_wrap=True)
    raise SystemExit(code)


def check_devices_flag(devices: str | None) -> None:
    """Validate a --devices value before anything is loaded (exit 2 naming the flag)."""
    if devices is None:
        return
    from orchestrator.devices import DeviceSpecError, parse_devices

    try:
        parse_devices(devices)
    except DeviceSpecError as exc:
        raise exc.under("--devices") from None


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def human(json_mode: bool) -> Console:
    return err if json_mode else out
