"""How a run ended, as the orchestrator and the dashboard read it: summary.json (the worker's last word,
with the `done` event) and one line saying why a worker ended badly."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

from orchestrator.rundir.events import EventWriter
from orchestrator.rundir.files import write_json_atomic
from orchestrator.rundir.names import BEST, DEADLINE_STOP, LAST, LOG, SUMMARY


def say_in_log(run_dir: Path, line: str, apart: bool = False) -> None:
    """One line of the orchestrator's own in the run's train.log, after the training's output (`apart`: on a
    line of its own after a blank one, below a progress bar the training may have left unended)."""
    with open(Path(run_dir) / LOG, "a") as log:
        log.write(f"{chr(10) if apart else ''}[yolo-orch] {line}\n")


def finish_run(run_dir: Path, events: EventWriter, *, epochs: int, epochs_completed: int,
               metrics: dict, started: float, **extra: Any) -> dict:
    """The worker's last word on a training that ended without an error: summary.json (atomic) and
    the `done` event; state `paused` when a deadline stopped it (DEADLINE_STOP), else `finished`."""
    state = "paused" if (run_dir / DEADLINE_STOP).is_file() else "finished"
    summary = run_summary(run_dir, state=state, epochs=epochs, epochs_completed=epochs_completed,
                          metrics=metrics, started=started, **extra)
    write_json_atomic(run_dir / SUMMARY, summary)
    events.emit("done", **summary)
    return summary


def run_summary(run_dir: Path, *, state: str, epochs: int, epochs_completed: int, metrics: dict,
                started: float, **extra: Any) -> dict:
    """summary.json's fields: how far the run got, its metrics and where its weights are."""
    return {
        "state": state,
        "epochs": epochs,
        "epochs_completed": epochs_completed,
        "metrics": metrics,
        "best": str(run_dir / BEST) if (run_dir / BEST).exists() else None,
        "last": str(run_dir / LAST) if (run_dir / LAST).exists() else None,
        "wall_time_s": round(time.time() - started, 2),
        **extra,
    }


_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b.*")


def failure_cause(run_dir: Path, exit_code: int | None = None, tail_bytes: int = 64 * 1024) -> str:
    """One line saying why a worker ended badly, from its exit status and the end of train.log:
    the signal that killed it, else the last exception line Python printed, else the last line."""
    if exit_code is not None and exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        hint = " (the kernel's OOM killer sends SIGKILL: see `dmesg`)" if name == "SIGKILL" else ""
        return f"the training process was killed by {name}{hint}"
    log = Path(run_dir) / LOG
    try:
        with open(log, "rb") as f:
            f.seek(max(0, log.stat().st_size - tail_bytes))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return f"exit code {exit_code}" if exit_code is not None else "no log"
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return line[:400]
    return (lines[-1][:400] if lines else f"exit code {exit_code}, nothing in {LOG}")
