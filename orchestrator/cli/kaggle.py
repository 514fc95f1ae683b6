"""`yolo-orch kaggle build|launch|wheels|push|status|pull|quota`: Kaggle TPU kernels.

Light: nothing here imports torch; `push`/`status`/`pull`/`quota` run the official `kaggle`
CLI and turn its failures (missing, not authenticated, refused) into one line and exit 2."""

from __future__ import annotations

import functools
import inspect
import typing
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from orchestrator.cli.options import JSON_OUT, SETS
from orchestrator.tasks import headline
from orchestrator.cli.common import human, print_json, run_exit_code

kaggle_app = typer.Typer(
    help="Kaggle TPU: build a kernel folder, launch a job end to end, the offline wheels dataset; push, status, "
         "pull, quota.",
    no_args_is_help=True,
)


# The options `build` and `launch` share, declared once (name: type and option); `kernel_options` adds them to
# both commands and hands each one kaggle/build.BuildOptions (`internet` is its enable_internet).
JOB_FILE = typer.Argument(..., help="Job spec YAML.")
KERNEL_OPTIONS: dict[str, tuple[Any, Any]] = {
    "machine_shape": (Optional[str], typer.Option(None, "--machine-shape", help="Kaggle accelerator (default TpuV5E8).")),
    "owner": (Optional[str], typer.Option(None, "--owner", help="Kaggle user (default: KAGGLE_USERNAME / kaggle.json).")),
    "wheels_dataset": (Optional[str], typer.Option(None, "--wheels-dataset", help="OWNER/SLUG of the wheels dataset.")),
    "data_dataset": (Optional[str], typer.Option(None, "--data-dataset", help="OWNER/SLUG of the data yaml's dataset.")),
    "resume_from": (Optional[str], typer.Option(None, "--resume-from", help="OWNER/KERNEL of the previous session.")),
    "run_id": (Optional[str], typer.Option(None, "--run-id", help="Run id (default: a new one; keep it across "
                                                                  "sessions).")),
    "devices": (Optional[str], typer.Option(None, "--devices", "-d", help="tpu:N or xla:cpu (default: tpu:8 on "
                                                                          "TpuV5E8).")),
    "kernel": (Optional[str], typer.Option(None, "--kernel", help="Kernel slug (default yolo-orch-<job name>).")),
    "session_hours": (Optional[float], typer.Option(None, "--session-hours", help="Kaggle session limit (default 9).")),
    "margin_minutes": (Optional[float], typer.Option(None, "--margin-minutes", help="Stop this early (default 20).")),
    "internet": (Optional[bool], typer.Option(None, "--internet/--no-internet", help="Kernel internet (default off).")),
    "max_boxes": (Optional[int], typer.Option(None, "--max-boxes", help="XLA per-image box limit (default: the job's "
                                                                        "xla.max_boxes, 32).")),
    "bf16": (Optional[bool], typer.Option(None, "--bf16/--no-bf16", help="bf16 autocast (default: the job's xla.bf16, "
                                                                         "else on for a TPU).")),
}


def kernel_options(command: Callable) -> Callable:
    """`command(job_file, ..., options: BuildOptions, ...)` as Typer sees it: the KERNEL_OPTIONS after the job
    file in its signature, gathered into one BuildOptions (with the command's own --session and --force, if any)."""
    own = [p for p in inspect.signature(command).parameters.values() if p.name != "options"]
    shared = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=option, annotation=kind)
              for name, (kind, option) in KERNEL_OPTIONS.items()]

    @functools.wraps(command)
    def with_options(**given):
        from orchestrator.kaggle.build import BuildOptions

        values = {name: given.pop(name) for name in KERNEL_OPTIONS}
        values["enable_internet"] = values.pop("internet")
        for name in ("session", "force"):  # build's own, part of the same bundle
            if name in given:
                values[name] = given.pop(name)
        return command(options=BuildOptions(**values), **given)

    with_options.__signature__ = inspect.Signature(own[:1] + shared + own[1:])
    with_options.__annotations__ = {**typing.get_type_hints(command),
                                    **{name: kind for name, (kind, _) in KERNEL_OPTIONS.items()}}
    with_options.__annotations__.pop("options", None)
    return with_options


@kaggle_app.command("build")
@kernel_options
def build_cmd(
    job_file: Path = JOB_FILE,
    options: Any = None,
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Kernel folder to write (default kaggle/<kernel slug>)."),
    session: Optional[int] = typer.Option(None, "--session", help="Session number (default 1, or previous + 1)."),
    set_: Optional[list[str]] = SETS,
    force: bool = typer.Option(False, "--force", help="Replace the files of an existing kernel folder."),
    json_out: bool = JSON_OUT,
) -> None:
    """Write a ready kernel folder: kernel-metadata.json, the runner script, the resolved job."""
    from dataclasses import replace

    from orchestrator.application.kaggle_sessions import build_kernel
    from orchestrator.kaggle.build import describe

    result = build_kernel(job_file, set_ or [], replace(options, out=out))
    console = human(json_out)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    if json_out:
        print_json(result.as_json())
        return
    for line in describe(result):
        console.print(line, highlight=False, markup=False)
    if result.bundle["wandb_mode"] == "online":
        console.print("W&B online: attach the WANDB_API_KEY secret to this kernel once in Kaggle's editor "
                      "(Add-ons > Secrets); without it the kernel logs offline.", highlight=False)


@kaggle_app.command("launch")
@kernel_options
def launch_cmd(
    job_file: Path = JOB_FILE,
    options: Any = None,
    set_: Optional[list[str]] = SETS,
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help="Where the run directory goes (default: the job's)."),
    poll: float = typer.Option(60.0, "--poll", help="Seconds between status checks."),
    max_sessions: int = typer.Option(20, "--max-sessions", help="Give up after this many sessions."),
    session_timeout_hours: Optional[float] = typer.Option(None, "--session-timeout-hours",
                                                          help="Give up on a session after this long."),
) -> None:
    """Train a job on Kaggle end to end: build, push, poll, pull into runs/<job>/<run id>/, and push the
    next session while the job's epochs are not done. Exit 0 finished, 1 a session failed, 130
    interrupted (the kernel may still run: the printed command continues)."""
    from orchestrator.application.kaggle_sessions import prepare_launch

    prepared = prepare_launch(job_file, set_ or [], options, runs_dir, poll, max_sessions, session_timeout_hours)
    raise typer.Exit(_launch_with_progress(prepared))


def _launch_with_progress(prepared) -> int:
    """The launch with a progress bar over the job's epochs; the exit code."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from orchestrator.application.kaggle_sessions import launch

    job = prepared.job
    epochs = job.spec.epochs
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=Console(stderr=True)) as progress:
        task = progress.add_task(f"{job.spec.name} epochs", total=epochs, status="building")
        shown: set[str] = set()

        def on_event(e: dict) -> None:
            kind, s = e["event"], e.get("session")
            say = progress.console.print
            if kind == "built":
                for w in e.get("warnings", []):
                    if w not in shown:
                        shown.add(w)
                        say(f"[yellow]warning:[/] {w}", highlight=False)
                progress.update(task, status=f"session {s}: built {e['kernel']}")
            elif kind == "pushed":
                say(f"session {s}: pushed {e['kernel']}" + (f" -> {e['url']}" if e.get("url") else ""),
                    highlight=False, markup=False)
                progress.update(task, status=f"session {s}: pushed")
            elif kind == "status":
                progress.update(task, status=f"session {s}: {e['state']} ({e['elapsed'] / 60:.0f} min)")
            elif kind == "pulled":
                progress.update(task, status=f"session {s}: pulled {len(e['files'])} files")
            elif kind == "session":
                r = e.get("resume") or {}
                progress.update(task, completed=int(r.get("epochs_done") or 0),
                                status=f"session {s}: {r.get('state', e['status'])}")
                say(f"session {s} ({e['kernel']}): {e['status']}, {r.get('epochs_done', '?')}/{epochs} epochs, "
                    f"{r.get('state', '-')}", highlight=False, markup=False)

        launched = launch(prepared, on_event)
    outcome = launched.outcome
    print(f"run {job.spec.name}/{outcome.run_id}: {outcome.state} -> {outcome.run_dir}")
    if outcome.state == "finished":
        print(f"{outcome.epochs_done}/{epochs} epochs in {len(launched.sessions)} session(s)")
    if outcome.note:
        print(outcome.note)
    metrics = (outcome.summary or {}).get("metrics") or {}
    for label, value in headline(metrics):
        if value is not None:
            print(f"  {label} {value:.4f}")
    return run_exit_code(outcome.state, outcome.exit_code)


@kaggle_app.command("wheels")
def wheels_cmd(
    out: Path = typer.Option(Path("kaggle/yolo-orch-wheels"), "--out", "-o", help="Flat wheels folder to fill."),
    owner: Optional[str] = typer.Option(None, "--owner", help="Kaggle user (default: KAGGLE_USERNAME / kaggle.json)."),
    slug: str = typer.Option("yolo-orch-wheels", "--slug", help="Dataset slug."),
    title: str = typer.Option("yolo-orch wheels for Kaggle TPU", "--title", help="Dataset title (6-50 chars)."),
    python_version: Optional[str] = typer.Option(None, "--python-version",
                                                 help="Python of the wheels (default: the Kaggle TPU image's)."),
    platform: Optional[list[str]] = typer.Option(None, "--platform", help="Wheel platform tags (repeatable)."),
    package: Optional[list[str]] = typer.Option(None, "--package", "-p",
                                                help="Requirement to ship instead of the default set (repeatable)."),
    no_project: bool = typer.Option(False, "--no-project", help="Do not build and ship this project's wheel."),
    no_wandb: bool = typer.Option(False, "--no-wandb", help="Leave W&B out of the default set."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the pip commands; write nothing."),
    json_out: bool = JSON_OUT,
) -> None:
    """Build the offline wheels folder (+ dataset-metadata.json) for the Kaggle TPU image."""
    from orchestrator.application.kaggle_sessions import build_wheels_folder
    from orchestrator.kaggle.wheels import KAGGLE_TPU_IMAGE, upload_hint

    console = human(json_out)
    if not json_out and not dry_run:
        console.print(f"resolving and downloading wheels for Python {python_version or KAGGLE_TPU_IMAGE['python']} "
                      f"into {out} ...", highlight=False)
    result = build_wheels_folder(out, owner, slug, title, python_version, platform, list(package) if package else None,
                                 not no_wandb, not no_project, dry_run)
    if json_out:
        print_json(result.as_json())
        return
    if dry_run:
        for cmd in result.commands:
            console.print(" ".join(cmd), highlight=False, markup=False, soft_wrap=True)
        return
    console.print(f"{len(result.wheels)} wheels in {result.folder} ({result.seconds:.0f} s); left out (in the image): "
                  f"{', '.join(result.excluded) or '-'}", highlight=False, markup=False)
    for note in result.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    for line in upload_hint(result):
        console.print(line, highlight=False, markup=False)


@kaggle_app.command("push")
def push_cmd(
    folder: Path = typer.Argument(..., help="Kernel folder made by `yolo-orch kaggle build`."),
    timeout: float = typer.Option(600, "--timeout", help="Seconds to wait for the CLI."),
    json_out: bool = JSON_OUT,
) -> None:
    """`kaggle kernels push -p FOLDER`: upload the runner and start the kernel."""
    from orchestrator.application.kaggle_sessions import push

    res = push(folder, timeout)
    if json_out:
        print_json(res)
        return
    human(False).print(f"pushed {res['kernel']}" + (f" version {res['version']}" if res["version"] else "")
                       + (f": {res['url']}" if res["url"] else ""), highlight=False, markup=False)


@kaggle_app.command("status")
def status_cmd(
    kernel: str = typer.Argument(..., help="OWNER/KERNEL, or a built kernel folder."),
    json_out: bool = JSON_OUT,
) -> None:
    """`kaggle kernels status`: queued, running, complete, error or cancelled."""
    from orchestrator.application.kaggle_sessions import status

    ref, res = status(kernel)
    if json_out:
        print_json(res)
        return
    text = f"{ref}: {res['state']}"
    if res["failure_message"]:
        text += f" ({res['failure_message']})"
    human(False).print(text, highlight=False, markup=False)


@kaggle_app.command("pull")
def pull_cmd(
    kernel: str = typer.Argument(..., help="OWNER/KERNEL, or a built kernel folder."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Where to download (default kaggle-output/<slug>)."),
    json_out: bool = JSON_OUT,
) -> None:
    """`kaggle kernels output`: download the latest version's outputs (tarball, resume.json, log)."""
    from orchestrator.application.kaggle_sessions import pull

    ref, dest, res = pull(kernel, out)
    state = res["resume"]
    if json_out:
        print_json(res)
        return
    console = human(False)
    console.print(f"{len(res['files'])} files from {ref} in {dest}", highlight=False, markup=False)
    if state:
        console.print(f"run {state.get('run_id')}: {state.get('epochs_done')}/{state.get('epochs')} epochs, "
                      f"{state.get('state')}" + ("" if state.get("done") else " (not done: build with --resume-from "
                                                  f"{ref} --run-id {state.get('run_id')} and push)"),
                      highlight=False, markup=False)
        if state.get("state") == "failed" and state.get("reason"):
            console.print(f"why: {state['reason']}", highlight=False, markup=False)


@kaggle_app.command("quota")
def quota_cmd(json_out: bool = JSON_OUT) -> None:
    """`kaggle quota`: weekly GPU/TPU hours used and left."""
    from orchestrator.application.kaggle_sessions import quota

    res = quota(json_out)
    if json_out:
        print_json(res)
        return
    human(False).print(res["text"] or "(no quota information)", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    app.add_typer(kaggle_app, name="kaggle")
