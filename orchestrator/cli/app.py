"""`yolo-orch`: the command line. Every path here stays free of torch and ultralytics
imports; training happens in child processes."""

from __future__ import annotations

import errno
import sqlite3
import sys

import typer

from orchestrator import __version__
from orchestrator.cli import data, k8s, plan, schema, slurm, submit, train
from orchestrator.cli import sweep as sweep_cli
from orchestrator.cli import kaggle as kaggle_cli
from orchestrator.cli import doctor as doctor_cli, resume as resume_cli, runs as runs_cli, ui as ui_cli
from orchestrator.cli.common import fail
from orchestrator.errors import ToolError

# Disk errors under the orchestrator itself (run dir, registry, events): one line and what to do.
DISK_ERRNOS = {
    errno.ENOSPC: "the disk is full: free space (or move runs_dir), then `yolo-orch resume` continues a run",
    errno.EDQUOT: "the disk quota is exceeded: free space (or move runs_dir)",
    errno.EROFS: "the filesystem is read-only: choose a writable runs_dir (or YOLO_ORCH_REGISTRY)",
    errno.EACCES: "permission denied: choose a writable runs_dir (or YOLO_ORCH_REGISTRY)",
}

app = typer.Typer(
    name="yolo-orch",
    help="Train Ultralytics YOLO the same way on CPU, GPUs, nodes and Kaggle TPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"yolo-orch {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    pass


for module in (submit, train, plan, schema, data, slurm, k8s):
    module.register(app)
for module in (runs_cli, resume_cli, doctor_cli, ui_cli):  # registry, resume, doctor, dashboard (docs/operations.md)
    module.register(app)

sweep_cli.register(app)  # yolo-orch sweep (docs/sweeps.md)
kaggle_cli.register(app)  # yolo-orch kaggle build|wheels|push|status|pull|quota (docs/kaggle.md)


def main(argv: list[str] | None = None) -> None:
    """The `yolo-orch` command (`argv`: its arguments, default sys.argv[1:])."""
    try:
        app(args=argv, standalone_mode=True)
    except ToolError as exc:  # bad input, a run's state, the machine or a service (orchestrator/errors.py):
        fail(exc.problems, exc.exit_code)  # one line per problem, the kind's exit code
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as exc:  # a full, read-only or forbidden disk under the orchestrator itself
        if exc.errno == errno.ENAMETOOLONG:  # a path the user gave (a flag the spec's checks do not see)
            fail([f"{str(exc.filename)[:60]}...: a name in this path is longer than the filesystem allows "
                  "(255 bytes)"])
        if exc.errno not in DISK_ERRNOS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        fail([f"{where}{exc.strerror or exc} ({errno.errorcode.get(exc.errno, exc.errno)}); "
              f"{DISK_ERRNOS[exc.errno]}"], code=1)
    except sqlite3.Error as exc:  # a registry or study file the tool cannot use
        if "disk is full" in str(exc):
            fail([f"database error: {exc}; {DISK_ERRNOS[errno.ENOSPC]}"], code=1)
        fail([f"database error: {exc}; run `yolo-orch doctor` to see which file and what to do"], code=1)


if __name__ == "__main__":
    main()
