"""Read the records of an offline W&B run file (run-*.wandb) as wandb itself wrote them, through the
package's own reader of wandb's transaction log (orchestrator/worker/wandb_history.py)."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.worker.wandb_history import records


def read_run(path: Path) -> dict:
    """{'config': {...}, 'history': [{...}], 'summary': {...}, 'run': Record.run}"""
    config, history, summary, run = {}, [], {}, None
    for rec in records(path):
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run = rec.run
            config.update(_items(rec.run.config.update))
        elif kind == "config":
            config.update(_items(rec.config.update))
        elif kind == "history":
            history.append(_items(rec.history.item))
        elif kind == "summary":
            summary.update(_items(rec.summary.update))
    return {"config": config, "history": history, "summary": summary, "run": run}


def _items(items) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}
