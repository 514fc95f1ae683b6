"""`yolo-orch runs`, `yolo-orch show RUN`, `yolo-orch logs RUN [--follow]`: the run registry; `yolo-orch
export RUN --format F`: a finished run's best.pt exported and checked.

Each command parses, calls the application layer (application/runs.py: the registry and the run
directory's read model) and renders. Light: sqlite3, rich and text files; never torch or ultralytics."""

from __future__ import annotations

import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from orchestrator.application.runs import existing_registry, export_run, find_run, list_runs, log_of, show_run
from orchestrator.cli.common import out, print_json
from orchestrator.cli.options import REGISTRY, RUNS_DIR
from orchestrator.cli.render import export_rows, tracker_rows
from orchestrator.registry import STATES, Run
from orchestrator.rundir import BEST, LAST, OomStep
from orchestrator.rundir.reading import as_text
from orchestrator.tasks import headline

STATE_STYLE = {"queued": "cyan", "running": "bold blue", "finished": "green", "failed": "red",
               "killed": "yellow", "stalled": "red", "pruned": "magenta"}


def _time(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _duration(row: Run) -> str:
    start = row.started_at
    if not start:
        return "-"
    end = row.ended_at or (time.time() if row.active else None)
    if not end:
        return "-"
    s = int(end - start)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _result(row: Run) -> str:
    """The task's headline metric, short: `mAP50-95 0.512`, `mask mAP50-95 0.40`, `top-1 0.93`."""
    metrics = row.metrics
    if not metrics:
        return "-"
    label, value = headline(metrics)[-1]
    return "-" if value is None else f"{label} {value:.3f}"


def _short_time(ts: float | None) -> str:
    """HH:MM today, else month-day HH:MM (`show RUN` has the full time)."""
    if not ts:
        return "-"
    when = datetime.fromtimestamp(ts)
    return when.strftime("%H:%M" if when.date() == datetime.now().date() else "%m-%d %H:%M")


def runs_table(rows: list[Run], title: str) -> Table:
    columns = ["run", "job", "state", "devices", "started", "time", "epochs", "result"]
    if any(r.oom_retries for r in rows):
        columns.append("oom")
    if any(r.study is not None for r in rows):
        columns.append("study/trial")
    # Compact and unwrapped: every cell is short, and at 80 columns a boxed table cut ids to `2026…`.
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    widths = {"run": 20, "job": 4, "state": 8, "time": 5, "epochs": 5, "result": 14}
    for name in columns:
        table.add_column(name, no_wrap=name not in ("job", "study/trial"), overflow="fold",
                         min_width=widths.get(name, 3))
    for r in rows:
        started = r.started_at or r.created_at
        cells = {
            "run": r.id, "job": r.job, "state": f"[{STATE_STYLE.get(r.state, '')}]{r.state}[/]",
            "devices": r.devices or "-",
            "started": _short_time(started),
            "time": _duration(r),
            "epochs": f"{r.epochs_done if r.epochs_done is not None else '-'}/{r.epochs or '-'}",
            "result": _result(r), "oom": str(r.oom_retries or 0),
            "study/trial": f"{r.study}/{r.trial}" if r.study is not None else "-",
        }
        table.add_row(*[cells[c] for c in columns])
    return table


def runs_cmd(
    state: Optional[str] = typer.Option(None, "--state", help=f"Only runs in this state: {', '.join(STATES)}."),
    study: Optional[str] = typer.Option(None, "--study", help="Only trials of this sweep study."),
    job: Optional[str] = typer.Option(None, "--job", help="Only runs of this job name."),
    limit: int = typer.Option(50, "--limit", min=1, help="At most this many (newest first)."),
    json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON."),
    runs_dir: Path = RUNS_DIR,
    registry: Optional[Path] = REGISTRY,
) -> None:
    """List runs and sweep trials from the registry (runs whose process vanished show as killed)."""
    found = list_runs(runs_dir, registry, state, study, job, limit)
    if json_out:
        print_json([r.as_dict() for r in found.rows])
        return
    if not found.rows:
        out.print(f"no runs{f' in state {state}' if state else ''} in {found.path}", highlight=False)
        if found.others:
            out.print(f"registries beside it (a job's runs_dir, `train project=`): "
                      f"{', '.join(f'yolo-orch runs --runs-dir {o}' for o in found.others)}", highlight=False,
                      soft_wrap=True)
        return
    # piped output is not cut to 80 columns: scripts and `less -S` get whole rows
    console = out if out.is_terminal else Console(width=max(out.width, 160))
    console.print(runs_table(found.rows, title=f"Runs ({found.path})"))


def show_cmd(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one (also JOB/ID-PREFIX)."),
    json_out: bool = typer.Option(False, "--json", help="Print everything as JSON."),
    runs_dir: Path = RUNS_DIR,
    registry: Optional[Path] = REGISTRY,
) -> None:
    """Show one run: registry row, plan, metrics, recoveries, files."""
    row = find_run(runs_dir, registry, run)
    info = show_run(row)
    if json_out:
        print_json(info)
        return
    table = Table(title=f"Run {row.label}", show_header=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(overflow="fold")
    style = STATE_STYLE.get(row.state, "")
    rows = [
        ("state", f"[{style}]{row.state}[/]" + (f" (exit code {row.exit_code})" if row.exit_code else "")),
        ("devices", row.devices or "-"),
        ("created", _time(row.created_at)),
        ("started", _time(row.started_at)),
        ("ended", _time(row.ended_at)),
        ("duration", _duration(row)),
        ("epochs", f"{row.epochs_done if row.epochs_done is not None else '-'}/{row.epochs or '-'}"),
        ("attempts", str(row.attempts)),
        ("oom retries", str(row.oom_retries)),
        ("pid", f"{row.pid or '-'} (worker {row.worker_pid or '-'}) on {row.host or '-'}"),
    ]
    if row.study is not None:
        rows.append(("study/trial", f"{row.study} / {row.trial}"))
    if info["plan"]:
        p = info["plan"]
        rows.append(("plan", f"batch {p['batch']} ({p['batch_per_device']} per device), nbs {p['nbs']}, accumulate "
                             f"{p['accumulate']}, {p['images_per_step']} images per optimizer step, policy {p['policy']}"))
    metrics = row.metrics
    if metrics:
        rows.append(("metrics", ", ".join(f"{k.split('/')[-1]} {v:.4g}" for k, v in metrics.items()
                                          if isinstance(v, (int, float)))))
    elif info["last_epoch"]:
        m = info["last_epoch"].get("metrics") or {}
        label, value = headline(m)[-1]
        shown = f"{value:.4f}" if isinstance(value, (int, float)) else "-"
        rows.append((f"epoch {info['last_epoch'].get('epoch')}", f"{label} {shown}"))
    for step in (info["recoveries"] or {}).get("oom", []):
        from orchestrator.plan.replan import describe_oom_step

        rows.append(("oom recovery", describe_oom_step(OomStep(**step))))
    for note in row.notes:
        rows.append(("note", f"{_time(note.time)}  {note.text}"))
    rows += export_rows(info["summary"]) + tracker_rows(info["summary"])
    rows.append(("run dir", row.run_dir or "-"))
    for name, path in info["files"].items():
        if path and name in (str(LAST), str(BEST)):
            rows.append((name.split("/")[-1], path))
    for k, v in rows:
        table.add_row(k, v)
    out.print(table)


def export_cmd(
    run: str = typer.Argument(..., help="Run id of a finished run, or a unique prefix of one."),
    formats: list[str] = typer.Option(..., "--format", "-f", help="onnx, torchscript or openvino (repeat for more)."),
    json_out: bool = typer.Option(False, "--json", help="Print the export records as JSON."),
    runs_dir: Path = RUNS_DIR,
    registry: Optional[Path] = REGISTRY,
) -> None:
    """Export a finished run's best.pt (each format in a process of its own), validate each file on the
    job's val split and compare it with best.pt; the records go into the run's summary.json."""
    records = export_run(find_run(runs_dir, registry, run), formats, say=None if json_out else out.print)
    if json_out:
        print_json(records)
    if not all(r.get("ok") for r in records.values()):
        raise typer.Exit(1)


def _write_log(data: bytes) -> None:
    """The log as written to a terminal; piped or redirected, as text (rundir.reading.as_text: grep and
    editors see lines)."""
    sys.stdout.buffer.write(data if sys.stdout.isatty() else as_text(data))
    sys.stdout.flush()


def logs_cmd(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    lines: int = typer.Option(0, "--tail", "-n", min=0, help="Only the last N lines first (0: all)."),
    runs_dir: Path = RUNS_DIR,
    registry: Optional[Path] = REGISTRY,
) -> None:
    """Print a run's train.log (the training process's stdout and stderr)."""
    row = find_run(runs_dir, registry, run)
    log = log_of(row, follow)
    offset = 0
    if log.is_file():
        data = log.read_bytes()
        offset = len(data)
        if lines:
            data = b"\n".join(data.splitlines()[-lines:]) + b"\n"
        _write_log(data)
    if follow:
        with existing_registry(runs_dir, registry) as reg:
            _follow(log, offset, lambda: getattr(reg.get(row.id), "active", False))


def _follow(log: Path, offset: int, running) -> None:
    """Print what the log gains from `offset` on until `running()` says the run ended (asked once a
    second) and the log is read to its end, or Ctrl-C."""
    last_check = 0.0
    try:
        while True:
            if log.is_file() and log.stat().st_size > offset:
                with log.open("rb") as f:
                    f.seek(offset)
                    chunk = f.read()
                offset += len(chunk)
                _write_log(chunk)
                continue
            if time.time() - last_check > 1.0:
                last_check = time.time()
                if not running():
                    if log.is_file() and log.stat().st_size > offset:
                        continue
                    break
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    app.command("runs")(runs_cmd)
    app.command("show")(show_cmd)
    app.command("logs")(logs_cmd)
    app.command("export")(export_cmd)
