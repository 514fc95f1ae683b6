"""`yolo-orch train key=value ... [--save JOB.yaml] [--dry-run] [--json]`: Ultralytics' own command line
(`yolo train model=... data=... epochs=100 batch=64 device=0,1 lr0=0.02`), planned and run like
`submit`; `--save` writes the job file it means, to graduate to job specs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.options import JSON_OUT
from orchestrator.cli.common import err, human


def train_cmd(
    args: list[str] = typer.Argument(..., help="Ultralytics train arguments, key=value, as `yolo train` takes them."),
    save: Optional[Path] = typer.Option(None, "--save", help="Write the equivalent job file here (validated first)."),
    force: bool = typer.Option(False, "--force", help="With --save: replace an existing job file."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved plan and train nothing."),
    json_out: bool = JSON_OUT,
) -> None:
    """Train with Ultralytics' key=value arguments (the job they mean: see --save).

    The task is the model's (or task=): e.g. yolo-orch train model=yolo11n-seg.yaml data=data.yaml epochs=10"""
    from orchestrator.application import training
    from orchestrator.cli.running import progress_on, render_submitted
    from orchestrator.rundir import dump_yaml
    from orchestrator.jobspec.files import check_output_file, write_output_file
    from orchestrator.jobspec.from_args import job_from_args
    from orchestrator.jobspec.loader import load_job_dict

    if save is not None:  # before the job's checks: nothing is planned in vain
        check_output_file(save, "--save", force)
    notes: list[str] = []
    raw = job_from_args(list(args), notes)
    for note in notes:  # Ultralytics' own warnings for the words it repairs
        err.print(f"warning: {note}", markup=False, highlight=False, soft_wrap=True)
    job = load_job_dict(dict(raw), base_dir=Path.cwd(), label="yolo-orch train")  # every check a job file gets

    def save_job(_plan) -> None:
        if save is not None:
            write_output_file(save, dump_yaml(raw), "--save", force)
            human(json_out).print(f"wrote {save}: `yolo-orch submit {save}` runs the same job", highlight=False)

    done = training.submit(job, training.SubmitRequest(dry_run=dry_run), progress_on(human(json_out)),
                           on_planned=save_job)
    render_submitted(done, job, json_out)


def register(app: typer.Typer) -> None:
    # unknown options are Ultralytics words (`--imgsz=640`, which its parser takes with a warning)
    app.command("train", context_settings={"allow_interspersed_args": True, "ignore_unknown_options": True})(train_cmd)
