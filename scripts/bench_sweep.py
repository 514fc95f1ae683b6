#!/usr/bin/env python
"""Benchmark: `yolo-orch sweep` (Optuna TPE + median pruning) against Ultralytics' own
tuner (`model.tune`, a genetic search without early stopping), on the same generated
task, the same search space (bounds from the tuner's default space) and the same total
budget of training epochs.

    python scripts/bench_sweep.py                       # 8 trials x 3 epochs a side (~20 min on 2 CPU cores)
    python scripts/bench_sweep.py --trials 20 --epochs 10 --images 1024 --device 0

Both sides start from the same configuration (the tuner's first iteration is its base
arguments; the sweep enqueues the same point as trial 0), train yolo11n from its yaml
(same initial weights, seed 0, deterministic) with AdamW pinned (`optimizer=auto` would
discard lr0), validate every epoch and score a run by the fitness of its best.pt
(detect: mAP50-95). The tuner runs every iteration to the end; the sweep prunes, so it
keeps starting trials (resuming its study) until it has spent the same number of epochs.

Writes docs/img/bench_sweep.json (every trial of both sides) and docs/img/bench_sweep.png
(best fitness so far against epochs spent) and prints a markdown table for docs/sweeps.md.
Offline: the tuner's trial subprocesses inherit YOLO_OFFLINE and the orchestrator's
Ultralytics config dir (integrations off, fonts present); the model is a local yaml.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# Bounds from Ultralytics' Tuner default space (ultralytics/engine/tuner.py), 8 of its keys.
SPACE = {
    "lr0": (1e-5, 1e-2),
    "lrf": (0.01, 1.0),
    "momentum": (0.7, 0.98, 0.3),
    "weight_decay": (0.0, 0.001),
    "warmup_epochs": (0.0, 5.0),
    "box": (1.0, 20.0),
    "cls": (0.1, 4.0),
    "mosaic": (0.0, 1.0),
}
LOG_SCALE = {"lr0"}  # the sweep samples lr0 on a log scale (same bounds)
BASE_HYP = {"optimizer": "AdamW", "lr0": 0.002}  # both sides start here (other values: Ultralytics defaults)

TUNE_SNIPPET = r"""
import json, sys
from orchestrator.worker.offline import prepare_env, disable_integrations
prepare_env()
from ultralytics import YOLO
disable_integrations()
cfg = json.loads(sys.argv[1])
space = {k: tuple(v) for k, v in cfg.pop("space").items()}
iterations = cfg.pop("iterations")
YOLO(cfg.pop("model")).tune(space=space, iterations=iterations, **cfg)
"""


def run(cmd: list[str], log: Path, cwd: Path, env: dict | None = None) -> tuple[int, float]:
    started = time.time()
    with open(log, "ab") as f:
        code = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}).returncode
    return code, time.time() - started


def best_so_far(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """[(cumulative epochs, fitness of that trial)] -> [(cumulative epochs, best so far)]."""
    out, best = [], float("-inf")
    for epochs, fitness in points:
        best = max(best, fitness)
        out.append((epochs, best))
    return out


def epochs_to_reach(curve: list[tuple[int, float]], target: float) -> int | None:
    return next((e for e, b in curve if b >= target - 1e-9), None)


def run_ultralytics(args, work: Path, data_yaml: Path) -> dict:
    folder = work / "ultralytics"
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "model": "yolo11n.yaml", "data": str(data_yaml), "epochs": args.epochs, "iterations": args.trials,
        "space": {k: list(v) for k, v in SPACE.items()}, "imgsz": args.imgsz, "batch": args.batch,
        "workers": 0, "plots": False, "val": True, "device": args.device, "seed": 0, "deterministic": True,
        "amp": False, "project": str(folder), "name": "tune", "exist_ok": False, **BASE_HYP,
    }
    code, wall = run([sys.executable, "-c", TUNE_SNIPPET, json.dumps(cfg)], folder / "tune.log", folder)
    results_file = folder / "tune" / "tune_results.ndjson"
    if not results_file.exists():
        raise SystemExit(f"model.tune wrote no results (exit {code}); see {folder / 'tune.log'}")
    rows = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    trials = [{"number": r["iteration"] - 1, "fitness": float(r["fitness"]), "epochs": args.epochs,
               "state": "COMPLETE", "params": r["hyperparameters"]} for r in rows]
    return {"trials": trials, "wall_s": round(wall, 1), "exit_code": code}


def run_sweep(args, work: Path, data_yaml: Path, budget: int) -> dict:
    folder = work / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    job = {
        "name": "bench", "model": "yolo11n.yaml", "data": str(data_yaml), "epochs": args.epochs,
        "imgsz": args.imgsz, "seed": 0, "deterministic": True, "hyp": dict(BASE_HYP),
        "reference": {"devices": 1, "batch": args.batch}, "target": {"devices": args.device},
        "wandb": {"mode": "disabled"}, "overrides": {"workers": 0, "plots": False, "amp": False},
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    space = {}
    for key, bounds in SPACE.items():
        space[key] = {"low": bounds[0], "high": bounds[1], **({"log": True} if key in LOG_SCALE else {})}
    sweep = {
        "study": "bench", "base": "job.yaml", "space": {"hyp": space}, "objective": "fitness",
        "sampler": {"name": "tpe", "seed": 0, "n_startup_trials": args.startup},
        "pruner": {"name": "median", "n_startup_trials": 2, "n_warmup_steps": 0},
        "budget": {"n_trials": args.trials}, "heartbeat": {"interval": 10},
        # trial 0 = the tuner's first iteration: its base arguments, clipped to the bounds
        "enqueue": [{"hyp": {"lr0": BASE_HYP["lr0"], "lrf": 0.01, "momentum": 0.937, "weight_decay": 0.0005,
                             "warmup_epochs": 3.0, "box": 7.5, "cls": 0.5, "mosaic": 1.0}}],
    }
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    n_trials, wall, summary = args.trials, 0.0, None
    while True:
        code, seconds = run([sys.executable, "-m", "orchestrator", "sweep", "sweep.yaml", "--n-trials", str(n_trials),
                             "--json"], folder / "sweep.log", folder, env={"COLUMNS": "160"})
        wall += seconds
        summary = json.loads((folder / "runs" / "sweeps" / "bench" / "summary.json").read_text())
        if code != 0:
            raise SystemExit(f"yolo-orch sweep failed (exit {code}); see {folder / 'sweep.log'}")
        if summary["epochs_spent"] >= budget:
            break
        n_trials += 1  # pruned trials left epochs in the budget: resume the study with one more trial
    trials = []
    for t in summary["trials"]:
        if t["state"] not in ("COMPLETE", "PRUNED"):
            continue
        trials.append({"number": t["number"], "fitness": t["values"][0] if t["values"] else 0.0,
                       "epochs": t["epochs"], "state": t["state"], "params": t["params"]})
    return {"trials": trials, "wall_s": round(wall, 1), "states": summary["states"],
            "best_yaml": summary.get("best_yaml")}


def curve(side: dict) -> list[tuple[int, float]]:
    points, spent = [], 0
    for t in sorted(side["trials"], key=lambda t: t["number"]):
        spent += int(t["epochs"] or 0)
        # a pruned trial never produced a finished model: it cannot be the sweep's answer
        points.append((spent, t["fitness"] if t["state"] == "COMPLETE" else float("-inf")))
    return [(e, b) for e, b in best_so_far(points)]


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.8), dpi=120)
    for key, label, color in (("sweep", "yolo-orch sweep (TPE + median pruning)", "tab:blue"),
                              ("ultralytics", "Ultralytics model.tune (genetic)", "tab:orange")):
        pts = [(0, None)] + [(e, b if b != float("-inf") else None) for e, b in result[key]["curve"]]
        xs = [p[0] for p in pts if p[1] is not None]
        ys = [p[1] for p in pts if p[1] is not None]
        ax.step(xs, ys, where="post", label=f"{label}: best so far", color=color, linewidth=2)
        spent = 0
        for t in sorted(result[key]["trials"], key=lambda t: t["number"]):  # every trial at its own score
            spent += int(t["epochs"] or 0)
            pruned = t["state"] == "PRUNED"
            ax.scatter([spent], [t["fitness"]], color=color, s=22 if pruned else 16, alpha=0.6,
                       marker="x" if pruned else "o", zorder=3)
    ax.scatter([], [], color="grey", marker="o", s=16, label="a trial trained to the end")
    ax.scatter([], [], color="grey", marker="x", s=22, label="a pruned trial (its last epoch's value)")
    target = result["ultralytics"]["best"]
    ax.axhline(target, color="tab:orange", linestyle=":", linewidth=1)
    ax.set_xlabel("training epochs spent")
    ax.set_ylabel("fitness (mAP50-95 of best.pt)")
    task = result["task"]
    ax.set_title(f"{task['images']} synthetic images, imgsz {task['imgsz']}, yolo11n from scratch, "
                 f"{result['budget_epochs']} epochs a side", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=8, help="Ultralytics tuner iterations; the sweep's first n_trials")
    p.add_argument("--epochs", type=int, default=3, help="epochs per trial")
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--val-images", type=int, default=64)
    p.add_argument("--imgsz", type=int, default=96)
    p.add_argument("--classes", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--startup", type=int, default=4, help="TPE random startup trials")
    p.add_argument("--device", default="cpu")
    p.add_argument("--work", type=Path, default=Path("/tmp/yolo-orch-bench-sweep"))
    p.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    p.add_argument("--replot", type=Path, help="only redraw the PNG from a result JSON")
    args = p.parse_args()
    if args.replot:
        plot(json.loads(args.replot.read_text()), args.out / "bench_sweep.png")
        return

    from orchestrator.data.synth import generate_dataset

    work = args.work / time.strftime("%Y%m%d-%H%M%S")
    work.mkdir(parents=True)
    data_yaml = generate_dataset(work / "data", images=args.images, val_images=args.val_images,
                                 classes=args.classes, imgsz=args.imgsz, seed=0)
    budget = args.trials * args.epochs
    print(f"work dir {work}; budget {budget} epochs a side", flush=True)

    ultra = run_ultralytics(args, work, data_yaml)
    print(f"ultralytics: {len(ultra['trials'])} iterations, {ultra['wall_s']} s", flush=True)
    sweep = run_sweep(args, work, data_yaml, budget)
    print(f"sweep: {len(sweep['trials'])} trials, {sweep['wall_s']} s", flush=True)

    result = {
        "task": {"images": args.images, "val_images": args.val_images, "imgsz": args.imgsz,
                 "classes": args.classes, "batch": args.batch, "model": "yolo11n.yaml", "device": args.device},
        "budget_epochs": budget, "epochs_per_trial": args.epochs, "space": SPACE,
        "log_scale_in_sweep": sorted(LOG_SCALE), "base_hyp": BASE_HYP,
    }
    for key, side in (("ultralytics", ultra), ("sweep", sweep)):
        side["curve"] = curve(side)
        side["best"] = max((t["fitness"] for t in side["trials"] if t["state"] == "COMPLETE"), default=0.0)
        side["epochs_spent"] = sum(int(t["epochs"] or 0) for t in side["trials"])
        result[key] = side
    target = ultra["best"]
    result["ultralytics"]["epochs_to_own_best"] = epochs_to_reach(ultra["curve"], target)
    result["sweep"]["epochs_to_ultralytics_best"] = epochs_to_reach(sweep["curve"], target)
    reach = result["sweep"]["epochs_to_ultralytics_best"]
    result["sweep"]["reached_in_half"] = reach is not None and reach <= result["ultralytics"]["epochs_to_own_best"] / 2

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_sweep.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    plot(result, args.out / "bench_sweep.png")

    u, s = result["ultralytics"], result["sweep"]
    print()
    print("| | Ultralytics `model.tune` | `yolo-orch sweep` |")
    print("|---|---|---|")
    print(f"| trials run (pruned) | {len(u['trials'])} (0) | {len(s['trials'])} "
          f"({sum(t['state'] == 'PRUNED' for t in s['trials'])}) |")
    print(f"| epochs spent | {u['epochs_spent']} | {s['epochs_spent']} |")
    print(f"| best fitness (mAP50-95) | {u['best']:.5f} | {s['best']:.5f} |")
    print(f"| epochs to reach the tuner's best ({target:.5f}) | {u['epochs_to_own_best']} | "
          f"{reach if reach is not None else 'not reached'} |")
    print(f"| wall time | {u['wall_s']:.0f} s | {s['wall_s']:.0f} s |")
    print(f"\nwrote {args.out / 'bench_sweep.json'} and {args.out / 'bench_sweep.png'}")


if __name__ == "__main__":
    main()
