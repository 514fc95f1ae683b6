"""`yolo-orch runs`, `yolo-orch show RUN`, `yolo-orch logs RUN [--follow]`: the run registry.

Light: sqlite3, rich and the run directory's text files; never torch or ultralytics."""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from orchestrator.cli.common import existing_registry, find_run, out, print_json
from orchestrator.cli.options import REGISTRY, RUNS_DIR
from orchestrator.registry import ACTIVE, DB_NAME, STATES, registry_path
from orchestrator.rundir import (BEST, EVENTS, LAST, LOG, RESULTS, SUMMARY, OomStep, parse_event,
                                 resolved_or_none)
from orchestrator.errors import UserError
from orchestrator.tasks import headline

STATE_STYLE = {"queued": "cyan", "running": "bold blue", "finished": "green", "failed": "red",
               "killed": "yellow", "stalled": "red", "pruned": "magenta"}


def other_registries(path: Path, limit: int = 5) -> list[str]:
    """Runs folders in the current folder (one level down) with a registry other than `path`'s."""
    found = []
    try:
        folders = sorted(p for p in Path.cwd().iterdir() if p.is_dir())[:200]
    except OSError:
        return []
    for folder in folders:
        if (folder / DB_NAME).is_file() and (folder / DB_NAME).resolve() != path:
            found.append(str(folder.relative_to(Path.cwd())))
    return found[:limit]


def _time(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "-"


def _duration(row: dict) -> str:
    start = row.get("started_at")
    if not start:
        return "-"
    end = row.get("ended_at") or (time.time() if row["state"] in ACTIVE else None)
    if not end:
        return "-"
    s = int(end - start)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _result(row: dict) -> str:
    """The task's headline metric, short: `mAP50-95 0.512`, `mask mAP50-95 0.40`, `top-1 0.93`."""
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else None
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


def runs_table(rows: list[dict], title: str) -> Table:
    columns = ["run", "job", "state", "devices", "started", "time", "epochs", "result"]
    if any(r.get("oom_retries") for r in rows):
        columns.append("oom")
    if any(r.get("study") is not None for r in rows):
        columns.append("study/trial")
    # Compact and unwrapped: every cell is short, and at 80 columns a boxed table cut ids to `2026…`.
    table = Table(title=title, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    widths = {"run": 20, "job": 4, "state": 8, "time": 5, "epochs": 5, "result": 14}
    for name in columns:
        table.add_column(name, no_wrap=name not in ("job", "study/trial"), overflow="fold",
                         min_width=widths.get(name, 3))
    for r in rows:
        started = r.get("started_at") or r.get("created_at")
        cells = {
            "run": r["id"], "job": r["job"], "state": f"[{STATE_STYLE.get(r['state'], '')}]{r['state']}[/]",
            "devices": r.get("devices") or "-",
            "started": _short_time(started),
            "time": _duration(r),
            "epochs": f"{r['epochs_done'] if r.get('epochs_done') is not None else '-'}/{r.get('epochs') or '-'}",
            "result": _result(r), "oom": str(r.get("oom_retries") or 0),
            "study/trial": f"{r['study']}/{r['trial']}" if r.get("study") is not None else "-",
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
    if state is not None and state not in STATES:
        raise UserError(f"--state: unknown state '{state}'; expected one of {', '.join(STATES)}")
    path = registry_path(registry if registry is not None else runs_dir)
    rows = []
    if path.is_file():
        with existing_registry(runs_dir, registry) as reg:
            rows = reg.list(state=state, study=study, job=job, limit=limit)
    if json_out:
        print_json(rows)
        return
    if not rows:
        out.print(f"no runs{f' in state {state}' if state else ''} in {path}", highlight=False)
        others = [] if state or job or study else other_registries(path)
        if others:
            out.print(f"registries beside it (a job's runs_dir, `train project=`): "
                      f"{', '.join(f'yolo-orch runs --runs-dir {o}' for o in others)}", highlight=False, soft_wrap=True)
        return
    # piped output is not cut to 80 columns: scripts and `less -S` get whole rows
    console = out if out.is_terminal else Console(width=max(out.width, 160))
    console.print(runs_table(rows, title=f"Runs ({path})"))


def show_info(row: dict) -> dict:
    run_dir = Path(row["run_dir"] or "")
    info: dict = {"run": row, "summary": None, "plan": None, "recoveries": None, "last_epoch": None, "files": {}}
    summary = run_dir / SUMMARY
    if summary.is_file():
        try:
            loaded = json.loads(summary.read_text(errors="replace"))
            info["summary"] = loaded if isinstance(loaded, dict) else None
        except (ValueError, RecursionError):  # a damaged summary: the registry row still says it all
            pass
    resolved = resolved_or_none(run_dir)
    if resolved is not None:
        plan = resolved.plan
        info["plan"] = {
            "devices": plan.devices, "launcher": plan.launcher, "policy": plan.policy,
            "batch": plan.train_args.get("batch"), "nbs": plan.train_args.get("nbs"),
            "batch_per_device": plan.effective.get("batch_per_device"), "accumulate": plan.accumulate,
            "images_per_step": plan.images_per_step, "epochs": plan.train_args.get("epochs"),
            "job_file": resolved.job_file,
        }
        info["recoveries"] = {"oom": [s.to_dict() for s in resolved.oom_history],
                              "resumes": [r.to_dict() for r in resolved.resumes]}
    events = run_dir / EVENTS
    if events.is_file():
        for line in reversed(events.read_bytes().splitlines()):
            event = parse_event(line)
            if event is not None and event.get("event") == "epoch":
                info["last_epoch"] = event
                break
    for name in (LOG, EVENTS, str(LAST), str(BEST), RESULTS):
        p = run_dir / name
        info["files"][name] = str(p) if p.exists() else None
    return info


def show_cmd(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one (also JOB/ID-PREFIX)."),
    json_out: bool = typer.Option(False, "--json", help="Print everything as JSON."),
    runs_dir: Path = RUNS_DIR,
    registry: Optional[Path] = REGISTRY,
) -> None:
    """Show one run: registry row, plan, metrics, recoveries, files."""
    with existing_registry(runs_dir, registry) as reg:
        row = find_run(reg, run)
    info = show_info(row)
    if json_out:
        print_json(info)
        return
    table = Table(title=f"Run {row['job']}/{row['id']}", show_header=False)
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(overflow="fold")
    style = STATE_STYLE.get(row["state"], "")
    rows = [
        ("state", f"[{style}]{row['state']}[/]" + (f" (exit code {row['exit_code']})" if row.get("exit_code") else "")),
        ("devices", row.get("devices") or "-"),
        ("created", _time(row.get("created_at"))),
        ("started", _time(row.get("started_at"))),
        ("ended", _time(row.get("ended_at"))),
        ("duration", _duration(row)),
        ("epochs", f"{row.get('epochs_done') if row.get('epochs_done') is not None else '-'}/{row.get('epochs') or '-'}"),
        ("attempts", str(row.get("attempts") or 0)),
        ("oom retries", str(row.get("oom_retries") or 0)),
        ("pid", f"{row.get('pid') or '-'} (worker {row.get('worker_pid') or '-'}) on {row.get('host') or '-'}"),
    ]
    if row.get("study") is not None:
        rows.append(("study/trial", f"{row['study']} / {row['trial']}"))
    if info["plan"]:
        p = info["plan"]
        rows.append(("plan", f"batch {p['batch']} ({p['batch_per_device']} per device), nbs {p['nbs']}, accumulate "
                             f"{p['accumulate']}, {p['images_per_step']} images per optimizer step, policy {p['policy']}"))
    metrics = row.get("metrics") if isinstance(row.get("metrics"), dict) else None
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
    for note in row.get("notes") or []:
        rows.append(("note", f"{_time(note.get('time'))}  {note.get('text')}"))
    rows.append(("run dir", row.get("run_dir") or "-"))
    for name, path in info["files"].items():
        if path and name in (str(LAST), str(BEST)):
            rows.append((name.split("/")[-1], path))
    for k, v in rows:
        table.add_row(k, v)
    out.print(table)


_ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
_REDRAWN = re.compile(rb"[^\n]*\r(?!\n)")  # a progress bar redrawn with \r: keep its last state


def _write_log(data: bytes) -> None:
    """The log as written to a terminal; piped or redirected, without colour codes and with each
    redrawn progress line reduced to its final state (grep and editors see text)."""
    if not sys.stdout.isatty():
        data = _REDRAWN.sub(b"", _ANSI.sub(b"", data))
    sys.stdout.buffer.write(data)
    sys.stdout.flush()


def logs_cmd(
    run: str = typer.Argument(..., help="Run id, or a unique prefix of one."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    lines: int = typer.Option(0, "--tail", "-n", min=0, help="Only the last N lines first (0: all)."),
    runs_dir: Path = RUNS_DIR,
    registry: Optional[Path] = REGISTRY,
) -> None:
    """Print a run's train.log (the training process's stdout and stderr)."""
    reg = existing_registry(runs_dir, registry)
    row = find_run(reg, run)
    log = Path(row["run_dir"] or "") / LOG
    if not log.is_file() and not (follow and row["state"] in ACTIVE):
        reg.close()
        raise UserError(f"RUN: {row['id']} has no log yet ({log})")
    offset = 0
    if log.is_file():
        data = log.read_bytes()
        offset = len(data)
        if lines:
            data = b"\n".join(data.splitlines()[-lines:]) + b"\n"
        _write_log(data)
    if not follow:
        reg.close()
        return
    try:
        last_check = 0.0
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
                current = reg.get(row["id"]) or {}
                if current.get("state") not in ACTIVE:
                    if log.is_file() and log.stat().st_size > offset:
                        continue
                    break
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        reg.close()


def register(app: typer.Typer) -> None:
    app.command("runs")(runs_cmd)
    app.command("show")(show_cmd)
    app.command("logs")(logs_cmd)
