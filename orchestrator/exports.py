"""Export after training, on the orchestrator side: each format in a training-free child process of its own
(`python -m orchestrator.worker.export RUN_DIR FORMAT`), one after the other, then their records in
summary.json's `exports` (rewritten atomically). A failed export or a score beyond the tolerance is a record
that says so; the trained weights are only read. Used after a finished run (runner) and by
`yolo-orch export RUN --format F` for a finished one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from orchestrator.rundir import SUMMARY, write_json_atomic
from orchestrator.rundir.tracking import EXPORTS

EXPORT_TIMEOUT_S = 1800  # an OpenVINO export of a large model on a small CPU takes minutes


def run_exports(run_dir: Path, formats: tuple[str, ...] | list[str], env: dict[str, str] | None = None,
                say: Callable[[str], None] = lambda line: None) -> dict[str, dict[str, Any]]:
    """Each format exported and checked; summary.json's `exports` updated with every record made so far."""
    records: dict[str, dict[str, Any]] = {}
    for fmt in formats:
        say(f"exporting best.pt to {fmt} (then validating it against best.pt)")
        records[fmt] = export_one(run_dir, fmt, env)
        say(describe(records[fmt]))
    if records:
        record_in_summary(run_dir, records)
    return records


def export_one(run_dir: Path, fmt: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    log = run_dir / EXPORTS / f"{fmt}.log"
    log.parent.mkdir(exist_ok=True)
    with open(log, "w") as out:
        try:
            done = subprocess.run([sys.executable, "-m", "orchestrator.worker.export", str(run_dir), fmt], env=env,
                                  stdout=out, stderr=subprocess.STDOUT, timeout=EXPORT_TIMEOUT_S)
            failed = None if done.returncode == 0 else f"the export process exited {done.returncode} (see {log})"
        except subprocess.TimeoutExpired:
            failed = f"the export took longer than {EXPORT_TIMEOUT_S} s (see {log})"
    record_path = run_dir / EXPORTS / f"{fmt}.json"
    if failed is None and record_path.is_file():
        return json.loads(record_path.read_text())
    return {"format": fmt, "ok": False, "error": failed or f"no record was written (see {log})"}


def record_in_summary(run_dir: Path, records: dict[str, dict[str, Any]]) -> None:
    path = run_dir / SUMMARY
    summary = json.loads(path.read_text()) if path.is_file() else {}
    summary["exports"] = {**(summary.get("exports") or {}), **records}
    write_json_atomic(path, summary)


def describe(record: dict[str, Any]) -> str:
    """One line: the file, its size and the difference from best.pt, or what went wrong."""
    fmt = record["format"]
    if record.get("error"):
        return f"export {fmt}: failed: {record['error']}"
    made = f"export {fmt}: {record['file']} ({record['size_bytes'] / 1e6:.1f} MB)"
    if record.get("compared") is False:
        return (f"{made}, not compared with best.pt: best.pt scores 0 on every val metric, so the export's 0 says "
                "nothing of its fidelity")
    verdict = "within" if record["ok"] else "BEYOND"
    return (f"{made}, largest val metric difference from best.pt {record['difference']:.4f}: {verdict} the tolerance "
            f"{record['tolerance']:g}")


def failed_exports(summary: dict | None) -> list[str]:
    """The formats in a run's summary whose export failed (no file: the record has an error); one beyond the
    tolerance made its file and says so in its record."""
    return [fmt for fmt, record in ((summary or {}).get("exports") or {}).items() if record.get("error")]
