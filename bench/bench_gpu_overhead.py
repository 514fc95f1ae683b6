"""The orchestrator's overhead on a GPU (issue #63 item 6): plain `YOLO(...).train` against `yolo-orch submit
--devices 0` with the same resolved arguments, in ABBA order (orchestrator, plain, plain, orchestrator: a drift
in the machine's speed falls on both sides alike), one training at a time, in two cells:

  compute   yolo11s, batch 64, AMP, cache=ram, 8 loader workers: the GPU bounds the step
  loader    yolo11n, batch 64, 2 loader workers: the loader bounds it

Each training reports, through the same callbacks on both sides (orchestrator/harness/step_times.py): the
steady-state images per second (every epoch after the first), the share of that time spent waiting for batches,
the peak GPU memory and the first epoch's training loss. The orchestrator side runs as users run it (W&B offline,
the default).

    python bench/bench_gpu_overhead.py --device 0                    # on a lent GPU (bench/gpu_i63.sh)
    python bench/bench_gpu_overhead.py --device cpu --smoke          # the mechanics on a CPU, tiny (the test)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import bench_scaling  # bench/: the machine's description, as every saved bench result names it

from orchestrator.harness import step_times
from orchestrator.harness.cli import COMMAND, REPO
from orchestrator.harness.jobs import TINY_MODEL, write_job

CELLS = {
    "compute": {"model": "yolo11s.yaml", "batch": 64, "imgsz": 640, "images": 1024, "amp": True, "cache": "ram",
                "workers": 8},
    "loader": {"model": "yolo11n.yaml", "batch": 64, "imgsz": 640, "images": 1024, "amp": True, "cache": False,
               "workers": 2},
}
SMOKE = {"smoke": {"model": str(TINY_MODEL), "batch": 8, "imgsz": 64, "images": 32, "amp": False, "cache": False,
                   "workers": 0}}
ORDER = ("orchestrator", "plain", "plain", "orchestrator")  # ABBA
IGNORED = ("project", "name", "exist_ok")  # where each side writes: the only arguments that differ


def job_for(cell: dict, device: str, epochs: int) -> dict:
    return {"name": "overhead", "model": cell["model"],
            "data": {"synth": {"images": cell["images"], "val_images": 64, "classes": 3, "imgsz": cell["imgsz"], "seed": 0}},
            "epochs": epochs, "imgsz": cell["imgsz"], "seed": 0,
            "hyp": {"preset": "scratch-default", "optimizer": "SGD", "lr0": 0.01},
            "reference": {"devices": 1, "batch": cell["batch"], "nbs": cell["batch"]},
            "target": {"devices": device, "batch": cell["batch"]}, "wandb": {"project": "yolo-orch-overhead"},
            "overrides": {"workers": cell["workers"], "amp": cell["amp"], "cache": cell["cache"], "plots": False}}


def run_side(side: str, job_path: Path, train_args: dict, work: Path, env: dict) -> dict:
    """One training on one side; its wall time, its timings and the arguments it trained with."""
    out = work / f"{side}-{len(list(work.glob(side + '-*.json')))}.json"
    env = {**env, step_times.ENV_OUT: str(out)}
    if side == "orchestrator":
        cmd = [*COMMAND, "submit", str(job_path), "--json", "--set", f"runs_dir={work / 'runs'}"]
        env["YOLO_ORCH_CALLBACKS"] = "orchestrator.harness.step_times:attach"
    else:
        project = work / "plain"
        cmd = [sys.executable, "-m", "orchestrator.harness.plain", "train",
               json.dumps({**train_args, "project": str(project), "name": out.stem, "exist_ok": True})]
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{side}: exit {done.returncode}\n{done.stderr[-3000:]}")
    args = train_args if side == "plain" else _trained_args(json.loads(done.stdout)["run_dir"])
    return {"side": side, "wall_s": round(wall, 2), **step_times.summarize(json.loads(out.read_text())),
            "args": {k: v for k, v in args.items() if k not in IGNORED}}


def _trained_args(run_dir: str) -> dict:
    from orchestrator.rundir import load_resolved

    return load_resolved(Path(run_dir)).plan.train_args


def run_cell(name: str, cell: dict, device: str, epochs: int, blocks: int, work: Path, env: dict) -> dict:
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    from orchestrator.data.cache import make_synth_data

    job_path = write_job(folder, job_for(cell, device, epochs))
    plan = make_plan(load_job(job_path))
    make_synth_data(plan.data.synth.model_dump(), plan.job.spec.task)  # both sides start from the generated data
    train_args = plan.train_args
    runs = []
    for block in range(blocks):
        for side in ORDER:
            runs.append({"block": block, **run_side(side, job_path, train_args, folder, env)})
            print(f"  {name} block {block} {side:12} {runs[-1]['images_per_s']:8.1f} img/s  data wait "
                  f"{runs[-1]['data_wait_share']:.1%}  epoch-1 loss {runs[-1]['epoch1_loss']}", flush=True)
    sides = {side: [r for r in runs if r["side"] == side] for side in ("orchestrator", "plain")}
    same = all(r["args"] == {k: v for k, v in train_args.items() if k not in IGNORED} for r in runs)
    summary = {side: {key: statistics.median(r[key] for r in rs) for key in ("images_per_s", "data_wait_share",
                                                                             "wall_s")}
               for side, rs in sides.items()}
    summary["images_per_s_ratio"] = summary["orchestrator"]["images_per_s"] / summary["plain"]["images_per_s"]
    return {"cell": cell, "epochs": epochs, "same_args": same, "runs": runs, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="0", help="target devices of both sides: one GPU (0), or cpu")
    ap.add_argument("--epochs", type=int, default=4, help="epochs per training (the first is not steady state)")
    ap.add_argument("--blocks", type=int, default=1, help="ABBA blocks per cell (4 trainings each)")
    ap.add_argument("--smoke", action="store_true", help="one tiny cell instead of the two (the suite's version)")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench_gpu_overhead")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "bench" / "gpu_overhead.json")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    os.environ["YOLO_ORCH_CACHE"] = str(args.work / "cache")  # the plan here and both sides read the data there
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cells = SMOKE if args.smoke else CELLS
    result = {"command": " ".join(["python bench/bench_gpu_overhead.py", *(argv or sys.argv[1:])]),
              "machine": bench_scaling.machine("cpu" if args.device == "cpu" else args.device), "cells": {}}
    for name, cell in cells.items():
        result["cells"][name] = run_cell(name, cell, args.device, args.epochs, args.blocks, args.work, env)
        args.out.write_text(json.dumps(result, indent=1) + "\n")  # after each cell: an interrupted run keeps it
    for name, c in result["cells"].items():
        s = c["summary"]
        print(f"{name}: orchestrator {s['orchestrator']['images_per_s']:.1f} img/s, plain {s['plain']['images_per_s']:.1f}"
              f" img/s, ratio {s['images_per_s_ratio']:.3f}; same arguments: {c['same_args']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
