"""Time the README's quickstart as a user runs it, with the environment already set up: `bash
scripts/quickstart.sh` (here with --json and a runs folder of its own, so the run is read back), and save what
the README quotes (its quickstart paragraph is generated from the file: bench/readme_numbers.py).

    python bench/bench_quickstart.py        # writes docs/bench/quickstart.json (about 2-3 minutes on 2 cores)

Run it with nothing else on the machine: the wall time is the number.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_scaling  # bench/: the machine's description, as every saved bench result names it

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "bench" / "quickstart.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="quickstart-bench-") as runs:
        started = time.perf_counter()
        done = subprocess.run(["bash", "scripts/quickstart.sh", "--json", "--set", f"runs_dir={runs}"], cwd=REPO,
                              capture_output=True, text=True)
        wall = time.perf_counter() - started
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return done.returncode
    summary = json.loads(done.stdout)["summary"]
    metrics = summary["metrics"]
    result = {"command": "bash scripts/quickstart.sh", "machine": bench_scaling.machine("cpu"),
              "date": datetime.date.today().isoformat(), "wall_s": round(wall, 1),
              "training_s": summary["wall_time_s"], "mAP50": round(metrics["metrics/mAP50(B)"], 4),
              "mAP50-95": round(metrics["metrics/mAP50-95(B)"], 4)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
