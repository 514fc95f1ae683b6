"""`yolo-orch`: the command line. Every path here stays free of torch and ultralytics
imports; training happens in child processes."""

from __future__ import annotations

import sys

import typer

from orchestrator import __version__
from orchestrator.cli import data, plan, schema, slurm, submit
from orchestrator.cli import sweep as sweep_cli
from orchestrator.cli import kaggle as kaggle_cli
from orchestrator.cli import doctor as doctor_cli, resume as resume_cli, runs as runs_cli
from orchestrator.cli.common import fail
from orchestrator.spec.errors import SpecError

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


for module in (submit, plan, schema, data, slurm):
    module.register(app)
for module in (runs_cli, resume_cli, doctor_cli):  # registry, resume, doctor (docs/operations.md)
    module.register(app)

sweep_cli.register(app)  # yolo-orch sweep (docs/sweeps.md)
kaggle_cli.register(app)  # yolo-orch kaggle build|wheels|push|status|pull|quota (docs/kaggle.md)


def main() -> None:
    try:
        app(standalone_mode=True)
    except SpecError as exc:
        fail(exc.problems)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
