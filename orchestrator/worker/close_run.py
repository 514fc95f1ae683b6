"""`python -m orchestrator.worker.close_run RUN_DIR`: close a run that recorded every epoch but stopped before it
finished (killed during the final validation of best.pt: a Slurm requeue near the end), as finishing closes it
(worker/startup.py): each tracker the job asked for (W&B, MLflow, TensorBoard) started, caught up to the run's
epochs and finished with the final metrics (summary.json's `metrics`), and their records put into summary.json.
A short process of the training side, started by resume.close_recorded_run; the exports come after it, from the
orchestrator side, as after any finished training. Exit 0 whatever a tracker did: each failure is a warning in
its record (a tracker never costs a run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from orchestrator.rundir import EVENTS, SUMMARY, EventWriter, load_resolved, write_json_atomic
from orchestrator.worker.offline import prepare_env
from orchestrator.worker.startup import finished_records, run_dir_main, start_trackers


def close(run_dir: Path) -> int:
    prepare_env()
    trackers = start_trackers(run_dir, load_resolved(run_dir), EventWriter(run_dir / EVENTS))
    summary = json.loads((run_dir / SUMMARY).read_text()) if (run_dir / SUMMARY).is_file() else {}
    records = finished_records(trackers, summary.get("metrics") or {})
    if records:
        write_json_atomic(run_dir / SUMMARY, {**summary, **records})
    return 0


if __name__ == "__main__":
    sys.exit(run_dir_main(close, "orchestrator.worker.close_run"))
