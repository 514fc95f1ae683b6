"""What the `kaggle` commands do, without a terminal: build a kernel folder, launch a job end to end across
sessions, build the offline wheels folder, and push, status, pull and quota through the `kaggle` CLI
(orchestrator/kaggle/). A `kaggle` CLI that is missing, signed out or refusing is a KaggleCliError (a
UserError: one line, exit 2); the commands render what these return."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from orchestrator.errors import UserError


def kernel_ref(value: str) -> str:
    """OWNER/KERNEL, or a built kernel folder (its kernel-metadata.json id)."""
    path = Path(value)
    meta = path / "kernel-metadata.json"
    if meta.is_file():
        return json.loads(meta.read_text())["id"]
    if value.count("/") == 1 and not path.exists():
        return value
    raise UserError(f"KERNEL: expected OWNER/KERNEL or a folder with kernel-metadata.json (got {value!r})")


def build_kernel(job_file: Path, sets: list[str], options):
    """`kaggle build`: the kernel folder for the job (kaggle/build.BuildResult); `options`: a kaggle/build.BuildOptions."""
    from orchestrator.jobspec.loader import load_job
    from orchestrator.kaggle.build import build

    return build(load_job(job_file, sets=sets), options)


@dataclass(frozen=True)
class Launch:
    """`kaggle launch`, checked and ready: the job (its epochs head the progress) and the loop's options."""

    job: Any  # jobspec.loader.LoadedJob
    options: Any  # kaggle.backend.LaunchOptions


def prepare_launch(job_file: Path, sets: list[str], options, runs_dir: Path | None, poll_s: float, max_sessions: int,
                   session_timeout_h: float | None) -> Launch:
    """The `kaggle` CLI found and signed in, the job loaded: nothing pushed yet."""
    from orchestrator.jobspec.loader import load_job
    from orchestrator.kaggle import tool
    from orchestrator.kaggle.backend import LaunchOptions

    tool.executable()
    tool.require_credentials()
    job = load_job(job_file, sets=sets)
    return Launch(job, LaunchOptions(build=options, runs_dir=runs_dir, poll_s=poll_s,
                                     max_sessions=max_sessions, session_timeout_h=session_timeout_h))


@dataclass(frozen=True)
class Launched:
    """A launch's end: the run as the runner ended it (runner.RunOutcome), and each session's record."""

    outcome: Any  # runner.RunOutcome
    sessions: list[dict]


def launch(prepared: Launch, on_event: Callable[[dict], None]) -> Launched:
    """The run's folder and row, then its sessions as attempts of the runner on the Kaggle backend (build,
    push, poll, pull; the next session until the job's epochs are done)."""
    from orchestrator.kaggle.backend import KaggleBackend
    from orchestrator.runner import supervise

    backend = KaggleBackend(prepared.job, prepared.options, on_event=on_event)
    run_id, run_dir = backend.open_run()
    return Launched(supervise(run_id, run_dir, backend), backend.sessions)


def build_wheels_folder(out: Path, owner: str | None, slug: str, title: str, python_version: str | None,
                        platforms: list[str] | None, packages: list[str] | None, with_wandb: bool, project: bool,
                        dry_run: bool):
    """`kaggle wheels`: the offline wheels folder for the Kaggle TPU image (kaggle/wheels.WheelsResult)."""
    from orchestrator.kaggle.build import BuildOptions, resolve_owner
    from orchestrator.kaggle.wheels import DEFAULT_PLATFORMS, KAGGLE_TPU_IMAGE, WheelsOptions, build_wheels

    opts = WheelsOptions(out=out, owner=resolve_owner(BuildOptions(owner=owner)), slug=slug, title=title,
                         python_version=python_version or KAGGLE_TPU_IMAGE["python"],
                         platforms=tuple(platforms or DEFAULT_PLATFORMS), packages=packages, with_wandb=with_wandb,
                         project=project)
    return build_wheels(opts, dry_run=dry_run)


def push(folder: Path, timeout: float) -> dict:
    """`kaggle kernels push -p FOLDER`: the kernel, its version and URL."""
    from orchestrator.kaggle import tool

    if not (folder / "kernel-metadata.json").is_file():
        raise UserError(f"FOLDER: {folder} has no kernel-metadata.json (run `yolo-orch kaggle build` first)")
    return tool.push(folder, timeout=timeout)


def status(kernel: str) -> tuple[str, dict]:
    """`kaggle kernels status`: (the kernel's OWNER/KERNEL, its state and failure message)."""
    from orchestrator.kaggle import tool

    ref = kernel_ref(kernel)
    return ref, tool.status(ref)


def pull(kernel: str, out: Path | None) -> tuple[str, Path, dict]:
    """`kaggle kernels output`: (OWNER/KERNEL, where the outputs went, the files and the session's resume
    state: its resume.json, None when absent or unreadable)."""
    from orchestrator.kaggle import tool

    ref = kernel_ref(kernel)
    dest = out or Path("kaggle-output") / ref.split("/")[1]
    res = tool.output(ref, dest)
    resume = dest / "resume.json"
    try:
        res["resume"] = json.loads(resume.read_text()) if resume.is_file() else None
    except ValueError:
        res["resume"] = None
    return ref, dest, res


def quota(csv: bool) -> dict:
    """`kaggle quota`: the weekly GPU/TPU hours used and left."""
    from orchestrator.kaggle import tool

    return tool.quota(csv=csv)
