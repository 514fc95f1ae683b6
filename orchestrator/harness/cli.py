"""yolo-orch as a user runs it: `python -m orchestrator ARGS` in a fresh interpreter, with the repository
on PYTHONPATH and wide lines (rich wraps at the terminal width; assertions read whole lines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "orchestrator"]


def cli_env(extra: dict | None = None, base: dict | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with the repository first on PYTHONPATH, then `extra`."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    env.update(extra or {})
    return env


def run_cli(*args, cwd: Path | None = None, env: dict | None = None, timeout: float = 600,
            input: str | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Run `yolo-orch ARGS` to its end; `env`: variables over this process's environment; `prefix`: what runs
    it (a network namespace's `nsenter`: services.RayCluster)."""
    return subprocess.run([*prefix, *COMMAND, *map(str, args)], cwd=cwd, env=cli_env(env), capture_output=True, text=True,
                          timeout=timeout, input=input)


def start_cli(*args, cwd: Path, env: dict | None = None, outputs: Path | None = None,
              new_session: bool = True, prefix: tuple[str, ...] = ()) -> subprocess.Popen:
    """`yolo-orch ARGS` started and left running, in its own session as a user's terminal holds it. With
    `outputs`, its stdout and stderr go to files there (`proc.out_path`, `proc.err_path`); else to pipes."""
    cmd, env = [*prefix, *COMMAND, *map(str, args)], cli_env(env)
    if outputs is None:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=new_session)
    outputs.mkdir(parents=True, exist_ok=True)
    stem = outputs / str(time.time_ns())
    with open(f"{stem}.out", "w") as out, open(f"{stem}.err", "w") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=new_session)
    proc.out_path, proc.err_path = f"{stem}.out", f"{stem}.err"
    return proc


def submit_json(job: Path, *args, cwd: Path | None = None, env: dict | None = None,
                timeout: float = 900, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """`yolo-orch submit JOB --json ARGS`: its JSON summary; a failed submit raises with its last output."""
    r = run_cli("submit", job, "--json", *args, cwd=cwd or job.parent, env=env, timeout=timeout, prefix=prefix)
    if r.returncode != 0:
        raise RuntimeError(f"submit exit {r.returncode}: {r.stderr.strip()[-3000:]}")
    return json.loads(r.stdout)


def submit_on(job: Path, devices: str, runs_dir: Path, sets: list[str] = (), cwd: Path = REPO) -> dict[str, Any]:
    """A bench's training: `submit JOB --devices D --json` into `runs_dir` (W&B off: the bench measures
    training, not logging), with `--set` values; the command is echoed, a failure ends the bench with
    its last output."""
    args = ["--devices", devices, "--set", f"runs_dir={runs_dir}", "--set", "wandb.mode=disabled"]
    args += [a for s in sets for a in ("--set", s)]
    print(f"$ yolo-orch submit {job} {' '.join(args)}", flush=True)
    try:
        return submit_json(job, *args, cwd=cwd)
    except RuntimeError as exc:
        raise SystemExit(f"devices {devices}: {exc}") from None
