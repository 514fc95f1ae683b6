"""Epochs from results.csv, without torch: how many a run trained and checkpointed, and the epochs whose
row landed but whose event did not (a kill between the two)."""

from __future__ import annotations

import csv
from pathlib import Path

from orchestrator.rundir.events import float_or_none, trained_epochs
from orchestrator.rundir.names import LAST, RESULTS


def completed_epochs(run_dir: Path) -> int:
    """Epochs trained and checkpointed, without torch: the last epoch of results.csv (Ultralytics writes
    an epoch's row just before that epoch's last.pt; a resume from an earlier checkpoint repeats rows),
    not counting a last row newer than last.pt: that epoch's checkpoint never landed (a kill or a full
    disk between the two), so a resume trains it again. No last.pt: nothing is checkpointed."""
    run_dir = Path(run_dir)
    csv, last = run_dir / RESULTS, run_dir / LAST
    if not csv.is_file() or not last.is_file():
        return 0
    rows = [line for line in csv.read_text(errors="replace").splitlines()[1:] if line.strip()]
    if rows and last.stat().st_mtime_ns < csv.stat().st_mtime_ns:
        rows = rows[:-1]
    return max(filter(None, map(row_epoch, rows)), default=0)


def row_epoch(row: str) -> int | None:
    """The epoch of one results.csv row (its first field), None for a row cut short or a header."""
    try:
        return int(float(row.split(",", 1)[0]))
    except ValueError:
        return None


def missing_epochs(events_path: Path, upto: int) -> list[tuple[int, dict[str, float]]]:
    """Epochs 1..upto (those a resume starts after) that results.csv recorded and events.jsonl does not,
    with their metrics: a kill between Ultralytics' save of last.pt and its on_fit_epoch_end trains an
    epoch whose event never came. Its results.csv row, written before last.pt, has its metrics."""
    results = Path(events_path).parent / RESULTS
    if upto <= 0 or not results.is_file():
        return []
    seen = set(trained_epochs(events_path))
    out = []
    with results.open(newline="") as f:
        for row in csv.DictReader(f):
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            try:
                epoch = int(float(row.get("epoch", "")))
            except ValueError:
                continue
            if epoch <= upto and epoch not in seen:
                seen.add(epoch)  # an epoch retrained by an earlier resume has two rows: one event
                values = {k: float_or_none(v) for k, v in row.items() if k not in ("epoch", "time")}
                out.append((epoch, {k: round(v, 6) for k, v in values.items() if v is not None}))
    return out
