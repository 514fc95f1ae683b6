"""What every doctor check returns, and the short-lived subprocess the heavy probes run in."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

PASS, WARN, FAIL = "pass", "warn", "fail"
GIB = 1 << 30
TIMED_OUT = 124  # run_python's exit code for a probe it stopped


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def run_python(code: str, timeout: float = 120, env: dict | None = None,
               args: tuple[str, ...] = ()) -> tuple[int, str, str]:
    try:
        p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **(env or {})})
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:  # what it printed before is kept (a probe prints a line per part)
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return TIMED_OUT, out, f"timed out after {timeout:.0f} s"


def last_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[\w.]+(Error|Exception)\b", ln):
            return ln[:400]
    return (lines[-1] if lines else "no output")[:400]
