#!/usr/bin/env python
"""GPU check: train the quickstart on 1 GPU and on all GPUs of this machine; print images/s and the speed-up.

    python scripts/gpu_check.py                                   # quickstart as is
    python scripts/gpu_check.py --set data.synth.images=4096 --set imgsz=320 --set epochs=5   # a heavier load

Both runs go through the real CLI (`yolo-orch submit --devices 0`, then `--devices N`: torchrun with
NCCL, one rank per GPU, the scaler keeping the reference's per-device batch). Throughput is
train images x epochs / wall time over epochs 2..E (Ultralytics' results.csv `time`, so validation
is included; the first epoch, with its dataset caching and CUDA warm-up, is left out).
Exits 2 with a clear message on a machine without CUDA GPUs: nothing is measured there.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

from orchestrator.rundir import load_resolved  # noqa: E402
from orchestrator.harness.cli import REPO, submit_on


def gpu_count() -> int:
    code = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    try:
        return int(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def train(job: Path, devices: str, runs_dir: Path, sets: list[str]) -> Path:
    return Path(submit_on(job, devices, runs_dir, sets)["run_dir"])


def throughput(run_dir: Path) -> dict:
    plan = load_resolved(run_dir).plan
    images = plan.train_images
    with open(run_dir / "results.csv") as f:
        times = [float(row["time"]) for row in csv.DictReader(f)]
    if len(times) >= 2:
        epochs, seconds = len(times) - 1, times[-1] - times[0]
    else:
        epochs, seconds = len(times), times[-1]
    summary = json.loads((run_dir / "summary.json").read_text())
    eff = plan.effective
    return {"devices": plan.devices, "world_size": eff["world_size"],
            "batch_per_device": eff["batch_per_device"], "images_per_s": images * epochs / seconds if seconds else None,
            "epochs_timed": epochs, "seconds": seconds, "mAP50-95": summary["metrics"].get("metrics/mAP50-95(B)"),
            "run_dir": str(run_dir)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", type=Path, default=REPO / "examples" / "quickstart.yaml")
    ap.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "gpu_check")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="job override KEY=VALUE")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)

    n = gpu_count()
    if n < 1:
        print("gpu_check: no CUDA GPU visible to torch (torch.cuda.device_count() == 0 or CUDA unavailable); "
              "run it on a machine with GPUs. Nothing was measured.", file=sys.stderr)
        return 2
    runs = [throughput(train(args.job.resolve(), "0", args.runs_dir.resolve(), args.sets))]
    if n >= 2:
        runs.append(throughput(train(args.job.resolve(), str(n), args.runs_dir.resolve(), args.sets)))
    else:
        print("gpu_check: only 1 GPU visible; no multi-GPU run, no speed-up", file=sys.stderr)
    print(f"{'devices':>8} {'world':>5} {'batch/dev':>9} {'images/s':>10} {'speed-up':>8} {'mAP50-95':>8}")
    base = runs[0]["images_per_s"]
    for r in runs:
        speedup = r["images_per_s"] / base if base and r["images_per_s"] else float("nan")
        r["speedup"] = speedup
        print(f"{r['devices']:>8} {r['world_size']:>5} {r['batch_per_device']:>9} {r['images_per_s']:>10.1f} "
              f"{speedup:>7.2f}x {r['mAP50-95'] or 0:>8.3f}")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
