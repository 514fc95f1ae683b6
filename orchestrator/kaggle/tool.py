"""Running the official `kaggle` CLI: `kernels push|status|output` and `quota`.

Failures become `KaggleCliError` with ONE line that says what to do (the CLI exits 2):
the executable is missing from PATH, no credentials are configured, the service refused
them, or a command failed. Credentials are located, never read out or printed; any
secret value from the environment is masked in the CLI's output before it is shown.

`$YOLO_ORCH_KAGGLE_CLI` names another executable (tests use a fake one).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from orchestrator.errors import UserError

TERMINAL = ("complete", "error", "cancel_requested", "cancel_acknowledged", "cancelled")
SECRET_ENV = ("KAGGLE_KEY", "KAGGLE_API_TOKEN", "WANDB_API_KEY")
AUTH_MARKERS = ("401", "unauthorized", "unauthenticated", "could not find kaggle.json", "invalid credentials",
                "403 client error: forbidden", "please authenticate")
INSTALL_HINT = "install it with `pip install kaggle` (docs/kaggle.md)"
AUTH_HINT = ("create an API token at https://www.kaggle.com/settings (API section) and save it as "
             "~/.kaggle/kaggle.json (chmod 600), or export KAGGLE_USERNAME and KAGGLE_KEY")


class KaggleCliError(UserError):
    """One line for the user (the `kaggle` CLI missing, not signed in, or refusing): the CLI prints it and exits 2."""


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str = ""
    lines: list[str] = field(default_factory=list)


def executable() -> str:
    name = os.environ.get("YOLO_ORCH_KAGGLE_CLI") or "kaggle"
    found = shutil.which(name)
    if not found:
        raise KaggleCliError(f"kaggle: the Kaggle CLI ({name}) is not on PATH; {INSTALL_HINT}")
    return found


def config_dir() -> Path:
    return Path(os.environ.get("KAGGLE_CONFIG_DIR") or Path.home() / ".kaggle").expanduser()


def credentials_source() -> str | None:
    """Where the CLI will find credentials (a description, never the secret), or None."""
    if os.environ.get("KAGGLE_API_TOKEN"):
        return "KAGGLE_API_TOKEN"
    if os.environ.get("KAGGLE_USERNAME") and os.environ.get("KAGGLE_KEY"):
        return "KAGGLE_USERNAME/KAGGLE_KEY"
    for name in ("kaggle.json", "access_token"):
        path = config_dir() / name
        if path.is_file():
            return str(path)
    return None


def username() -> str | None:
    """The account name (KAGGLE_USERNAME, else kaggle.json's `username`); None if unknown."""
    if os.environ.get("KAGGLE_USERNAME"):
        return os.environ["KAGGLE_USERNAME"]
    path = config_dir() / "kaggle.json"
    try:
        value = json.loads(path.read_text()).get("username")
    except (OSError, ValueError, AttributeError):
        return None
    return str(value) if value else None


def require_credentials() -> str:
    source = credentials_source()
    if source is None:
        raise KaggleCliError(f"kaggle: not authenticated (no {config_dir() / 'kaggle.json'}, no KAGGLE_USERNAME+KAGGLE_KEY, "
                             f"no KAGGLE_API_TOKEN); {AUTH_HINT}")
    return source


def mask(text: str) -> str:
    for name in SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def run(args: list[str], timeout: float = 600) -> Result:
    """`kaggle ARGS`; raises KaggleCliError (one line) on any failure."""
    exe = executable()
    require_credentials()
    label = "kaggle " + " ".join(args[:2])
    try:
        proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise KaggleCliError(f"{label}: no answer within {timeout:.0f} s (network?)") from None
    except OSError as exc:
        raise KaggleCliError(f"{label}: could not start {exe}: {exc}") from None
    stdout, stderr = mask(proc.stdout or ""), mask(proc.stderr or "")
    lines = [ln.strip() for ln in (stdout + "\n" + stderr).splitlines() if ln.strip()]
    text = " ".join(lines).lower()
    if any(m in text for m in AUTH_MARKERS):
        first = next((ln for ln in lines if any(m in ln.lower() for m in AUTH_MARKERS)), lines[0] if lines else "")
        raise KaggleCliError(f"{label}: Kaggle refused the credentials ({first[:160]}); {AUTH_HINT}")
    if proc.returncode != 0:
        if "invalid choice" in text:
            raise KaggleCliError(f"{label}: this Kaggle CLI does not know that command ({_last(lines)[:160]}); "
                                 "upgrade it with `pip install -U kaggle`")
        raise KaggleCliError(f"{label}: failed with exit code {proc.returncode}: {_last(lines)[:200] or 'no output'}")
    return Result(list(args), proc.returncode, stdout, stderr, lines)


def _last(lines: list[str]) -> str:
    return lines[-1] if lines else ""


# ---------------------------------------------------------------- commands

def push(folder: Path, timeout: float = 600) -> dict:
    """`kaggle kernels push -p FOLDER`. The CLI reports some push errors with exit code 0
    ("Kernel push error: ..."), so the output is checked too."""
    meta = json.loads((Path(folder) / "kernel-metadata.json").read_text())
    res = run(["kernels", "push", "-p", str(folder)], timeout=timeout)
    bad = [ln for ln in res.lines if re.search(r"\berror\b", ln, re.I) and "0 error" not in ln.lower()]
    if bad:
        raise KaggleCliError(f"kaggle kernels push: {bad[0][:200]}")
    version = None
    m = re.search(r"version\s+(\d+)", res.stdout, re.I)
    if m:
        version = int(m.group(1))
    url = next((w for ln in res.lines for w in ln.split() if w.startswith("https://")), None)
    return {"kernel": meta["id"], "version": version, "url": url, "output": res.lines}


def parse_status(text: str) -> tuple[str, str, str | None]:
    """(state, raw, failure message) from `kaggle kernels status` output. state is lower-case:
    queued, running, complete, error, cancel_requested, cancel_acknowledged (or whatever word
    the service sent)."""
    m = re.search(r'has status "([^"]+)"', text)
    raw = m.group(1) if m else ""
    if not raw:
        m = re.search(r"KernelWorkerStatus\.([A-Z_]+)", text)
        raw = m.group(0) if m else text.strip().splitlines()[-1] if text.strip() else ""
    state = raw.rsplit(".", 1)[-1].strip().lower()
    fm = re.search(r'Failure message: "(.*)"', text)
    return state, raw, (fm.group(1) if fm and fm.group(1) else None)


def status(kernel: str, timeout: float = 120) -> dict:
    res = run(["kernels", "status", kernel], timeout=timeout)
    state, raw, message = parse_status(res.stdout or "\n".join(res.lines))
    if not state:
        raise KaggleCliError(f"kaggle kernels status: could not read a status from: {_last(res.lines)[:200]}")
    return {"kernel": kernel, "state": state, "raw": raw, "failure_message": message,
            "terminal": state in TERMINAL}


def output(kernel: str, dest: Path, timeout: float = 1800) -> dict:
    """`kaggle kernels output KERNEL -p DEST -o` (the latest version's /kaggle/working files and its log)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    before = {p for p in dest.rglob("*") if p.is_file()}
    res = run(["kernels", "output", kernel, "-p", str(dest), "-o"], timeout=timeout)
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    new = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and p not in before)
    return {"kernel": kernel, "dest": str(dest), "files": files, "new": new, "output": res.lines}


def quota(csv: bool = False, timeout: float = 120) -> dict:
    """`kaggle quota` (weekly GPU/TPU hours; a 2026 addition to the CLI) as text and, with
    `csv` (the CLI's `-v`), as rows too."""
    try:
        res = run(["quota", "-v"] if csv else ["quota"], timeout=timeout)
    except KaggleCliError as exc:
        if "does not know that command" in str(exc):
            raise KaggleCliError(
                "kaggle quota: this Kaggle CLI has no `quota` command (added in 2026); upgrade with "
                "`pip install -U kaggle`, or read the weekly TPU hours left in a notebook editor's "
                "Session options panel on kaggle.com") from None
        raise
    return {"text": res.stdout.strip(), "rows": _csv_rows(res.stdout) if csv else []}


def _csv_rows(text: str) -> list[dict]:
    import csv
    import io

    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2 or "," not in lines[0]:
        return []
    return [dict(row) for row in csv.DictReader(io.StringIO("\n".join(lines)))]
