"""What a test or campaign reads back from a run directory, and the one wait: events.jsonl (whole lines
only, as the tool's own reader takes them), results.csv's rows, the epochs W&B holds, planted links, the
dataset yaml it trains on."""

from __future__ import annotations

import csv
import subprocess
import time
from pathlib import Path

from orchestrator.rundir import load_resolved, parse_event


def wait_for(predicate, timeout: float = 300, poll: float = 0.2) -> bool:
    """Poll `predicate` until it holds (True) or `timeout` seconds pass (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(poll)
    return False


def trained_data(run_dir: Path) -> Path:
    """The dataset yaml a run trains on, as its job.resolved.yaml hands it to Ultralytics (a converted copy in
    the cache, the run's own copy of a data.yaml, or the user's)."""
    return Path(load_resolved(run_dir).plan.data_path)


def read_events(run_dir: Path) -> list[dict]:
    """A run's events.jsonl, each line through the tool's own parser: a line being written (not yet
    whole JSON) or damaged is skipped, as the tool skips it."""
    path = Path(run_dir) / "events.jsonl"
    lines = path.read_bytes().splitlines() if path.is_file() else []
    return [e for e in map(parse_event, lines) if e is not None]


def epoch_events(run_dir: Path) -> list[int]:
    """The epochs events.jsonl holds an `epoch` event for, in order."""
    return [int(e["epoch"]) for e in read_events(run_dir) if e.get("event") == "epoch"]


def results_rows(run_dir_or_csv: Path) -> list[dict[str, str]]:
    """results.csv's rows under its stripped column names (Ultralytics pads them); [] when there is none."""
    path = Path(run_dir_or_csv)
    path = path / "results.csv" if path.is_dir() else path
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [{k.strip(): (v or "").strip() for k, v in row.items()} for row in csv.DictReader(f)]


def results_column(run_dir_or_csv: Path, name: str) -> list[float]:
    """One column of results.csv as numbers, an epoch a value."""
    return [float(row[name]) for row in results_rows(run_dir_or_csv)]


def wait_first_epoch(runs: Path, proc: subprocess.Popen, job: str = "tiny", timeout: float = 300) -> Path:
    """The run directory of job `job` under `runs` once its first epoch event is written (`proc`, the
    submit, must still be running)."""
    found: list[Path] = []

    def reached() -> bool:
        found.extend(e.parent for e in runs.glob(f"{job}/*/events.jsonl") if epoch_events(e.parent))
        if not found and proc.poll() is not None:
            raise AssertionError(proc.stdout.read() if proc.stdout else "submit exited early")
        return bool(found)

    if not wait_for(reached, timeout, poll=0.05):
        raise AssertionError("no epoch event within the timeout")
    return found[0]


def wandb_epochs(run_dir: Path) -> list[int]:
    """The epochs the run's W&B run holds, in the order its attempts wrote them (every offline attempt
    folder of the run's id, oldest first): each epoch once when a resumed run continued its W&B run."""
    from orchestrator.worker.wandb_history import logged_epochs

    return logged_epochs(run_dir / "wandb", run_dir.name.replace(".", "-"))


def no_links(run_dir: Path) -> list[Path]:
    """Symbolic links anywhere in the run directory, less the one wandb-core makes inside each attempt's
    own folder (logs/debug-core.log, to its log under ~/.cache/wandb: nothing writes through it, and no
    later attempt writes in that folder); W&B's links in wandb/ itself are switched off."""
    return [p for p in run_dir.rglob("*") if p.is_symlink()
            and not (p.name == "debug-core.log" and p.parent.name == "logs" and "-run-" in p.parent.parent.name)]


def legal_path(frm: str, to: str) -> list[str] | None:
    """The shortest chain of legal moves (registry/states.py) from `frm` to `to`: the states after `frm`,
    ending with `to`; [] when they are one; None when no chain of moves gets there."""
    from orchestrator.registry import MOVES, RunState

    paths: dict[RunState, list[str]] = {RunState(frm): []}
    todo = [RunState(frm)]
    while todo:
        here = todo.pop(0)
        for nxt in MOVES[here]:
            if nxt not in paths:
                paths[nxt] = [*paths[here], str(nxt)]
                todo.append(nxt)
    return paths.get(RunState(to))


def walk_to(reg, run_id: str, state: str, **fields):
    """A test's row moved to `state` the way runs get there, by legal moves only (`fields` written with the
    last); its registry.Run after. AssertionError when no chain of moves leads there from where it is."""
    stored = reg._get_raw(run_id)["state"]  # as written (a read shows a vanished run killed): where move() starts
    path = legal_path(stored, state)
    assert path is not None, f"no legal moves lead run {run_id} from {stored} to {state}"
    for i, step in enumerate(path):
        assert reg.move(run_id, step, **(fields if i == len(path) - 1 else {}))
    if not path and fields:
        reg.update(run_id, **fields)
    return reg.get(run_id)


def newest_row(registry: Path, run_id: str | None = None):
    """The newest run of the registry (`run_id`'s, when given) as the commands record it (a registry.Run); None
    without a registry."""
    from orchestrator.registry import Registry

    if not Path(registry).is_file():
        return None
    with Registry.open(registry) as reg:
        rows = [r for r in reg.list() if run_id is None or r.id == run_id]
    return max(rows, key=lambda r: r.created_at) if rows else None
