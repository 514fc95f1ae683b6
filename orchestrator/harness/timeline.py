"""Where the suite's time goes, test by test and process by process: with YOLO_ORCH_TEST_TIMELINE=FILE set,
each test process appends one JSON line per test to FILE (tests/conftest.py: its worker, node id, start and
end); `python -m orchestrator.harness.timeline FILE` sums them. `--durations=40` (pyproject.toml) names the
slowest tests of every run; this adds every test, which test process ran it and when, so that a module's
share and an idle or overloaded process show (docs/testing.md, How long)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

TIMELINE_ENV = "YOLO_ORCH_TEST_TIMELINE"


def record(nodeid: str, started: float) -> None:
    """One test's line, when the timeline is asked for (the test processes append to one file)."""
    path = os.environ.get(TIMELINE_ENV)
    if not path:
        return
    line = {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "test": nodeid, "start": started,
            "end": time.time()}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


def summary(path: Path, top: int = 30) -> str:
    rows = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    if not rows:
        return f"{path}: no test recorded"
    first, last = min(r["start"] for r in rows), max(r["end"] for r in rows)
    lines = [f"{len(rows)} tests over {last - first:.0f} s"]
    by_worker = defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append(r)
    for worker, mine in sorted(by_worker.items()):
        busy = sum(r["end"] - r["start"] for r in mine)
        lines.append(f"{worker}: {len(mine)} tests, busy {busy:.0f} s, done at {max(r['end'] for r in mine) - first:.0f} s")
    by_module = Counter()
    for r in rows:
        by_module[r["test"].split("::")[0]] += r["end"] - r["start"]
    lines.append(f"test seconds in all {sum(by_module.values()):.0f}; by module:")
    lines += [f"{seconds:8.1f}  {module}" for module, seconds in by_module.most_common(top)]
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        print("usage: python -m orchestrator.harness.timeline FILE (written with YOLO_ORCH_TEST_TIMELINE=FILE)",
              file=sys.stderr)
        sys.exit(2)
    try:
        print(summary(Path(sys.argv[1])))
    except BrokenPipeError:  # `| head` read what it wanted; no traceback when Python flushes at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
