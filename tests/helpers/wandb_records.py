"""Read the records of an offline W&B run file (run-*.wandb) as wandb itself wrote them, through the
package's own reader of wandb's transaction log (orchestrator/worker/wandb_history.py)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.worker.wandb_history import fields, records


def read_run(path: Path) -> dict:
    """{'config': {...}, 'history': [{...}], 'summary': {...}, 'run': Record.run}"""
    config, history, summary, run = {}, [], {}, None
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run = rec.run
            config.update(fields(rec.run.config.update))
        elif kind == "config":
            config.update(fields(rec.config.update))
        elif kind == "history":
            history.append(fields(rec.history.item))
        elif kind == "summary":
            summary.update(fields(rec.summary.update))
    return {"config": config, "history": history, "summary": summary, "run": run}

