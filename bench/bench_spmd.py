#!/usr/bin/env python3
"""The XLA backend on 1, 2 and 4 devices (SPMD) against plain CPU Ultralytics, same job, same
images per step: compiles, steady step time, wall time and final metrics.

    PJRT_DEVICE=CPU .venv/bin/python bench/bench_spmd.py [--job examples/quickstart.yaml]
        [--devices cpu xla:cpu xla:cpu:2 xla:cpu:4] [--json-out docs/bench/spmd.json]

Each target is one `yolo-orch submit JOB --devices D --json` in a fresh process, one after the
other (2-core machine: timings side by side in one run). xla:cpu:N are N virtual XLA:CPU devices
in one process: the TPU path, not TPU speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from orchestrator.harness.cli import COMMAND, REPO



def run(job: Path, devices: str, runs_dir: Path) -> dict:
    env = dict(os.environ, PJRT_DEVICE="CPU", YOLO_OFFLINE="1")
    started = time.time()
    res = subprocess.run([*COMMAND, "submit", str(job), "--devices", devices, "--json",
                          "--set", f"runs_dir={runs_dir}"], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.time() - started
    if res.returncode != 0:
        return {"devices": devices, "error": res.stderr[-500:], "wall_s": round(wall, 1)}
    summary = json.loads(res.stdout)["summary"]
    xla = summary.get("xla") or {}
    return {
        "devices": devices,
        "wall_s": round(wall, 1),
        "train_s": summary.get("wall_time_s"),
        "mAP50": summary["metrics"].get("metrics/mAP50(B)"),
        "mAP50-95": summary["metrics"].get("metrics/mAP50-95(B)"),
        "compiles": xla.get("xla/compile_count"),
        "compile_s": xla.get("xla/compile_time_s"),
        "compile_steps": xla.get("xla/compile_steps"),
        "steady_step_s": xla.get("xla/steady_step_time_s"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench_spmd.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--job", type=Path, default=REPO / "examples" / "quickstart.yaml")
    p.add_argument("--devices", nargs="+", default=["cpu", "xla:cpu", "xla:cpu:2", "xla:cpu:4"])
    p.add_argument("--runs-dir", type=Path, default=Path("/tmp/bench_spmd_runs"))
    p.add_argument("--json-out", type=Path)
    ns = p.parse_args(argv)
    rows = []
    for devices in ns.devices:
        row = run(ns.job.resolve(), devices, ns.runs_dir)
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"job": str(ns.job), "time": time.strftime("%Y-%m-%d %H:%M"), "rows": rows}
    if ns.json_out:
        ns.json_out.parent.mkdir(parents=True, exist_ok=True)
        ns.json_out.write_text(json.dumps(out, indent=2) + "\n")
    print("| devices | compiles (steps) | compile s | steady step s | train s | mAP50 | mAP50-95 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['devices']} | {r.get('compiles', '-')} {r.get('compile_steps') or ''} | {r.get('compile_s', '-')} | "
              f"{r.get('steady_step_s', '-')} | {r.get('train_s', '-')} | {r.get('mAP50', '-')} | {r.get('mAP50-95', '-')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
