#!/usr/bin/env python
"""Benchmark: `yolo-orch sweep` (Optuna TPE + median pruning) against Ultralytics' own
tuner (`model.tune`, an evolutionary search without early stopping), on the same generated
task, the same search space (bounds from the tuner's default space), the same starting
point and the same total budget of training epochs.

    python bench/bench_sweep.py                    # 12 trials x 10 epochs a side, 2 repeats (~35 min, 2 CPU cores)
    python bench/bench_sweep.py --repeat 1 --trials 30 --epochs 20 --images 2048 --imgsz 320 --device 0

The task is one a model learns within a trial: 256 synthetic training images at 128 px, 16
optimizer steps per epoch (batch 16, nbs 16), HSV jitter off (colours are random per
object). Both sides start from Ultralytics' defaults for the searched keys with AdamW
pinned at lr0 0.002 (`optimizer=auto` would discard lr0); at 128 px those defaults hurt
(mosaic 1.0 shrinks objects to a few pixels), so there is something to find.
`--tuner-optimizer auto` runs the tuner as shipped instead: optimizer=auto, which trains
AdamW at a fitted lr with beta1 0.9 whatever lr0 and momentum the tuner mutates to; the
sweep's base job pins what auto resolves to (yolo-orch refuses to search lr0 under auto),
so the start is again the same training on both sides. `--pretrain EPOCHS` fine-tunes
instead: both sides start from the init trained on another generated task. The tuner's
first iteration is its base arguments; the sweep enqueues the same point as trial 0. Every
trial of both sides starts from the same initial weights: yolo11n built from its yaml under
seed 0 and saved in half precision (init.pt), which is what the tuner does with its base
model anyway (Ultralytics' MultiTrainer), so the same hyperparameters train the same model
on both sides (seed 0, deterministic). Every epoch is validated and a run scores the
fitness of its best.pt (detect: mAP50-95). The tuner trains every iteration to the
end; the sweep prunes and keeps starting trials until it has spent the same number of
epochs (`budget.epochs`). The two sides of a repeat run at the same time, one core each.
The tuner runs exactly as `model.tune` runs it but keeps every iteration's folder
(cleanup=False), so both sides' per-epoch validation (results.csv) can be read: the
measures are given per trial and per epoch.

Writes docs/img/bench_sweep.json (every trial of both sides) and docs/img/bench_sweep.png
(best fitness so far against epochs spent) and prints a markdown table for docs/sweeps.md.
Offline: the tuner runs in a process with YOLO_OFFLINE and the orchestrator's Ultralytics
config dir (integrations off, fonts present); the initial weights are built locally from
the model yaml.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from orchestrator.harness.cli import COMMAND, REPO
from orchestrator.harness.runs import results_rows


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
LOG_SCALE: set[str] = set()  # none: the sweep samples the tuner's bounds on the tuner's linear scale
BASE_HYP = {"optimizer": "AdamW", "lr0": 0.002}  # both sides start here (other searched keys: Ultralytics defaults)
START = {"lr0": 0.002, "lrf": 0.01, "momentum": 0.937, "weight_decay": 0.0005, "warmup_epochs": 3.0,
         "box": 7.5, "cls": 0.5, "mosaic": 1.0}  # = the tuner's first iteration
FIXED = {"hsv_h": 0.0, "hsv_s": 0.0, "hsv_v": 0.0}  # not searched, the same on both sides
NBS = 16  # one optimizer step per batch of 16: 16 steps per epoch on 256 images


def auto_start(args) -> dict:
    """What Ultralytics' optimizer=auto (model.tune's default) really trains with on this task, from
    the scaler's model of build_optimizer: AdamW at a fitted lr, betas (0.9, 0.999), warmup_bias_lr
    0.0, whatever lr0 and momentum say. yolo-orch refuses to sweep lr0 over an auto base job, so the
    sweep's base job pins exactly these values: both sides' first trial trains the same model."""
    from orchestrator.scaling.ultralytics_math import resolve_auto_optimizer

    name, lr, momentum = resolve_auto_optimizer(args.classes, args.images, args.batch, NBS, args.epochs)
    return {"optimizer": name, "lr0": lr, "momentum": momentum, "warmup_bias_lr": 0.0}


def base_hyp(args) -> dict:
    if args.tuner_optimizer == "auto":
        return auto_start(args)
    return {**BASE_HYP, "lr0": args.start_lr0}


def start_point(args) -> dict:
    """The searched keys at the sweep's base job: Ultralytics' defaults, except what base_hyp pins."""
    return {**START, **{k: v for k, v in base_hyp(args).items() if k in START}}


def tuner_hyp(args) -> dict:
    """The tuner's base arguments for the searched keys' start: as the sweep's, or (auto) Ultralytics'
    own defaults, optimizer=auto included, exactly as `model.tune(...)` runs when not told otherwise."""
    if args.tuner_optimizer == "auto":
        return {"optimizer": "auto"}
    return base_hyp(args)


def sampler_options(args) -> dict:
    opts = {"n_startup_trials": args.startup}
    if args.startup_mode == "local":  # the startup draws near the start (trial 0), like the tuner's mutations
        opts["startup"] = "local"
        if args.startup_scale is not None:
            opts["startup_scale"] = args.startup_scale
    return opts


def pruner_spec(args) -> dict:
    # Median of the COMPLETE trials at the same epoch, from the first one on: trial 0 (the known
    # starting point) is the first yardstick, and since pruned trials never enter the median it
    # stays the median of the good ones. No decision before epoch `warmup` (7 of 10): on this task
    # the curves take off between epochs 4 and 7, so how far a trial has got at epoch 5 ranks
    # trials poorly (rank correlation with the final score 0.64-0.74 over the tuner's complete
    # curves; 0.91-0.97 at epoch 7: `predictiveness` below, printed with every run).
    return {"name": "median", "n_startup_trials": 1, "n_warmup_steps": args.warmup_steps}


# Plain Ultralytics offline (orchestrator/harness/plain.py): the seed-0 init, the tuner, and for
# --pretrain the seed-0 init trained on a different generated task (other seed, 4x the images, its own
# classes), Ultralytics' defaults with AdamW at 0.002, whose best.pt (half precision) becomes the initial
# weights of every trial of both sides: fine-tuning, the usual real case.
PLAIN = [sys.executable, "-m", "orchestrator.harness.plain"]


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


def per_epoch_fitness(run_dir: str | None) -> list[float] | None:
    """The fitness of every epoch's validation (detect: mAP50-95) from a run's results.csv."""
    rows = results_rows(Path(run_dir)) if run_dir else []
    return [float(row["metrics/mAP50-95(B)"]) for row in rows] or None


def train_args(args) -> dict:
    """The Ultralytics training arguments every training of the benchmark shares (the sweep's job
    sets the same through the orchestrator's spec)."""
    return {"imgsz": args.imgsz, "batch": args.batch, "nbs": NBS, "workers": 0, "plots": False,
            "device": args.device, "seed": 0, "deterministic": True, "amp": False, **FIXED}


def pretrain(args, root: Path) -> tuple[Path, dict]:
    """Train the seed-0 init on the pretraining task (PRETRAIN_SNIPPET); returns its best weights
    and what was done (recorded as the result's task["pretrain"])."""
    from orchestrator.data.synth import generate_dataset

    done = {"epochs": args.pretrain, "images": 4 * args.images, "classes": args.pretrain_classes, "seed": 1}
    data_yaml = generate_dataset(root / "pretrain-data", images=done["images"], val_images=args.val_images,
                                 classes=done["classes"], imgsz=args.imgsz, seed=done["seed"])
    out = root / "pretrained.pt"
    cfg = {"model": str(args.init), "out": str(out), "data": str(data_yaml), "epochs": done["epochs"],
           **train_args(args), "optimizer": "AdamW", "lr0": 0.002, "project": str(root / "pretrain"), "name": "train"}
    print(f"pretraining {done['epochs']} epochs on {done['images']} images of {done['classes']} classes", flush=True)
    code, wall = run([*PLAIN, "pretrain", json.dumps(cfg)], root / "pretrain.log", root)
    if code != 0:
        raise SystemExit(f"pretraining failed; see {root / 'pretrain.log'}")
    return out, {**done, "wall_s": wall}


def run_ultralytics(args, work: Path, data_yaml: Path) -> dict:
    folder = work / "ultralytics"
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "model": str(args.init), "data": str(data_yaml), "epochs": args.epochs, "iterations": args.trials,
        "space": {k: list(v) for k, v in SPACE.items()}, **train_args(args), "val": True,
        "project": str(folder), "name": "tune", "exist_ok": False, **tuner_hyp(args),
    }
    code, wall = run([*PLAIN, "tune", json.dumps(cfg)], folder / "tune.log", folder)
    return {**read_ultralytics(folder, args.epochs), "wall_s": round(wall, 1), "exit_code": code}


def read_ultralytics(folder: Path, epochs: int | None) -> dict:
    """The tuner's trials from its folder (also usable on the folder of an interrupted run).
    `epochs`: every iteration's count (None where unknown: bench/pruning_signal.py)."""
    results_file = folder / "tune" / "tune_results.ndjson"
    if not results_file.exists():
        raise SystemExit(f"model.tune wrote no results; see {folder / 'tune.log'}")
    rows = [json.loads(line) for line in results_file.read_text().splitlines() if line.strip()]
    trials = []
    for r in rows:
        run_dir = next(iter(r.get("save_dirs", {}).values()), None)
        trials.append({"number": r["iteration"] - 1, "fitness": float(r["fitness"]), "epochs": epochs,
                       "state": "COMPLETE", "params": r["hyperparameters"], "run_dir": run_dir,
                       "per_epoch": per_epoch_fitness(run_dir)})
    return {"trials": trials}


def run_sweep(args, work: Path, data_yaml: Path, budget: int, seed: int) -> dict:
    folder = work / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    job = {
        "name": "bench", "model": str(args.init), "data": str(data_yaml), "epochs": args.epochs,
        "imgsz": args.imgsz, "seed": 0, "deterministic": True, "hyp": {**base_hyp(args), **FIXED},
        "reference": {"devices": 1, "batch": args.batch, "nbs": NBS}, "target": {"devices": args.device},
        "wandb": {"mode": "disabled"}, "overrides": {"workers": 0, "plots": False, "amp": False},
    }
    (folder / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    space = {}
    for key, bounds in SPACE.items():
        space[key] = {"low": bounds[0], "high": bounds[1], **({"log": True} if key in LOG_SCALE else {})}
    sweep = {
        "study": "bench", "base": "job.yaml", "space": {"hyp": space}, "objective": "fitness",
        "sampler": {"name": "tpe", "seed": seed, **sampler_options(args)},
        "pruner": pruner_spec(args),
        # the epoch budget ends the study; n_trials only has to be out of reach
        "budget": {"n_trials": 10 * args.trials, "epochs": budget}, "heartbeat": {"interval": 10},
        "enqueue": [{"hyp": start_point(args)}],  # trial 0 = the tuner's first iteration
    }
    (folder / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    code, wall = run([*COMMAND, "sweep", "sweep.yaml", "--json"], folder / "sweep.log",
                     folder, env={"COLUMNS": "160"})
    if code != 0:
        raise SystemExit(f"yolo-orch sweep failed (exit {code}); see {folder / 'sweep.log'}")
    return {**read_sweep(folder), "wall_s": round(wall, 1)}


def read_sweep(folder: Path) -> dict:
    """The sweep's trials from its study summary (also usable on the folder of an interrupted run)."""
    summary = json.loads((folder / "runs" / "sweeps" / "bench" / "summary.json").read_text())
    trials = []
    for t in summary["trials"]:
        if t["state"] not in ("COMPLETE", "PRUNED"):
            continue
        trials.append({"number": t["number"], "fitness": t["values"][0] if t["values"] else 0.0,
                       "epochs": t["epochs"], "state": t["state"], "params": t["params"],
                       "run_dir": t.get("run_dir"), "per_epoch": per_epoch_fitness(t.get("run_dir"))})
    return {"trials": trials, "states": summary["states"], "best_yaml": summary.get("best_yaml")}


def in_order(side: dict):
    """(trial, epochs spent once it ended) for a side's trials in the order they ran."""
    spent = 0
    for t in sorted(side["trials"], key=lambda t: t["number"]):
        spent += int(t["epochs"] or 0)
        yield t, spent


def searched_match(t: dict, bar: float) -> bool:
    """A searched trial (not trial 0, the shared start) that finished at or above `bar`."""
    return t["number"] > 0 and t["state"] == "COMPLETE" and t["fitness"] >= bar - 1e-9


def curve(side: dict) -> list[tuple[int, float]]:
    # a pruned trial never produced a finished model: it cannot be the sweep's answer
    return best_so_far([(spent, t["fitness"] if t["state"] == "COMPLETE" else float("-inf"))
                        for t, spent in in_order(side)])


def epoch_curve(side: dict) -> list[tuple[int, float]] | None:
    """Best so far after every epoch rather than every trial. A complete trial counts from the epoch
    its validation reached a value (that model is then on disk, as best.pt); its last point is its
    final score (best.pt validated again). A pruned trial's epochs count but never score, as above.
    None when a trial has no per-epoch record (results from before this measure existed)."""
    points, spent = [], 0
    for t in sorted(side["trials"], key=lambda t: t["number"]):
        per_epoch, epochs, complete = t.get("per_epoch"), int(t["epochs"] or 0), t["state"] == "COMPLETE"
        if per_epoch is None:
            return None
        for i in range(epochs):
            spent += 1
            value = per_epoch[i] if complete and i < len(per_epoch) else float("-inf")
            if complete and i == epochs - 1:
                value = max(value, t["fitness"])
            points.append((spent, value))
    return best_so_far(points)


def one_repeat(args, work: Path, data_yaml: Path, budget: int, seed: int) -> dict:
    with ThreadPoolExecutor(2 if args.parallel else 1) as pool:  # the two sides share the machine alike
        ultra_future = pool.submit(run_ultralytics, args, work, data_yaml)
        sweep_future = pool.submit(run_sweep, args, work, data_yaml, budget, seed)
        ultra, sweep = ultra_future.result(), sweep_future.result()
    return score({"sweep_seed": seed, "work_dir": str(work), "ultralytics": ultra, "sweep": sweep})


def score(result: dict) -> dict:
    """Derived numbers of one repeat, from its trials alone (so --rescore can redo them)."""
    for key in ("ultralytics", "sweep"):
        side = result[key]
        side["curve"] = curve(side)
        side["best"] = max((t["fitness"] for t in side["trials"] if t["state"] == "COMPLETE"), default=0.0)
        side["epochs_spent"] = sum(int(t["epochs"] or 0) for t in side["trials"])
        side["pruned"] = sum(t["state"] == "PRUNED" for t in side["trials"])
    u, s = result["ultralytics"], result["sweep"]
    u["epochs_to_own_best"] = epochs_to_reach(u["curve"], u["best"])
    # the measure: epochs each side needs to reach the tuner's best
    s["epochs_to_ultralytics_best"] = reach = epochs_to_reach(s["curve"], u["best"])
    s["reached_in_half"] = reach is not None and reach <= u["epochs_to_own_best"] / 2
    # When the tuner's best is the shared starting point (trial 0 on both sides, the same model),
    # both "reach" it with the first trial and the measure above cannot tell the searches apart.
    # So also: when did a SEARCHED configuration (not trial 0) first match or beat the tuner's
    # best, against the epochs the tuner spent in all, and did a searched one of the tuner's?
    beat_at = next((spent for t, spent in in_order(s) if searched_match(t, u["best"])), None)
    # The same measure at the granularity of epochs: the first epoch after which each side held a
    # model as good as the tuner's best (a trial can get there before its last epoch).
    u_epochs, s_epochs = epoch_curve(u), epoch_curve(s)
    u["epochs_to_own_best_by_epoch"] = epochs_to_reach(u_epochs, u["best"]) if u_epochs else None
    s["epochs_to_ultralytics_best_by_epoch"] = reach = epochs_to_reach(s_epochs, u["best"]) if s_epochs else None
    s["reached_in_half_by_epoch"] = None if u["epochs_to_own_best_by_epoch"] is None else \
        reach is not None and reach <= u["epochs_to_own_best_by_epoch"] / 2
    s["searched_epochs_to_ultralytics_best"] = beat_at
    s["searched_within_half_budget"] = beat_at is not None and beat_at <= u["epochs_spent"] / 2
    u["best_searched"] = max((t["fitness"] for t in u["trials"] if t["number"] > 0), default=None)
    s["best_searched"] = max((t["fitness"] for t in s["trials"] if t["number"] > 0 and t["state"] == "COMPLETE"),
                             default=None)
    return result


def predictiveness(result: dict) -> dict[int, float | None]:
    """How well a trial's fitness at epoch k ranks trials like their final scores: Spearman's rank
    correlation over every trial trained to the end (mostly the tuner's: it never prunes, so its
    curves are not selected by a pruner). A pruner deciding at an epoch where this is low cuts
    trials that would have finished well."""
    curves = [t["per_epoch"] for r in result["repeats"] for side in ("ultralytics", "sweep")
              for t in r[side]["trials"]
              if t["state"] == "COMPLETE" and t.get("per_epoch") and len(t["per_epoch"]) == result["epochs_per_trial"]]
    if len(curves) < 4:
        return {}
    final = [max(c) for c in curves]
    return {k + 1: rank_correlation([c[k] for c in curves], final) for k in range(result["epochs_per_trial"] - 1)}


def rank_correlation(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rho; None where it is undefined (every x equal: early epochs, all mAP 0)."""
    import warnings

    from scipy.stats import spearmanr  # an Ultralytics dependency

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="An input array is constant")
        rho = float(spearmanr(xs, ys).statistic)
    return None if math.isnan(rho) else rho


def hit_rate(result: dict) -> dict:
    """Why the target holds or not, as arithmetic. p: the share of the sweep's searched trials (not
    trial 0) that finished at or above their repeat's tuner best. k: how many searched trials each
    repeat ran to their end (complete or pruned) within half the tuner's budget, which is set by
    where the pruner decides. If each draw hit independently with p, a repeat would meet the target
    with chance 1 - (1 - p)^k; summed over the repeats that predicts how many meet it. It shows what
    reliability would take: with k = 6, p >= 0.32 for 9 repeats in 10."""
    hits = searched = 0
    ks = []
    for r in result["repeats"]:
        bar, half = r["ultralytics"]["best"], r["ultralytics"]["epochs_spent"] / 2
        searched_trials = [(t, spent) for t, spent in in_order(r["sweep"]) if t["number"] > 0]
        searched += len(searched_trials)
        hits += sum(searched_match(t, bar) for t, _ in searched_trials)
        ks.append(sum(spent <= half for _, spent in searched_trials))
    p = hits / searched if searched else 0.0
    return {"searched_trials": searched, "hits": hits, "p": p, "k_within_half_budget": ks,
            "predicted_within_half_budget": sum(1 - (1 - p) ** k for k in ks)}


def summarize(result: dict) -> dict:
    reps = result["repeats"]
    ratios = [r["sweep"]["epochs_to_ultralytics_best"] / r["ultralytics"]["epochs_to_own_best"]
              for r in reps if r["sweep"]["epochs_to_ultralytics_best"] is not None]
    searched = [r["sweep"]["searched_epochs_to_ultralytics_best"] / r["ultralytics"]["epochs_spent"]
                for r in reps if r["sweep"]["searched_epochs_to_ultralytics_best"] is not None]
    by_epoch = [r for r in reps if r["sweep"].get("reached_in_half_by_epoch") is not None]
    epoch_ratios = [r["sweep"]["epochs_to_ultralytics_best_by_epoch"] / r["ultralytics"]["epochs_to_own_best_by_epoch"]
                    for r in by_epoch if r["sweep"]["epochs_to_ultralytics_best_by_epoch"] is not None]
    return {
        "repeats": len(reps),
        "reached_in_half": sum(r["sweep"]["reached_in_half"] for r in reps),
        "reached": len(ratios), "median_epoch_ratio": statistics.median(ratios) if ratios else None,
        "epoch_granular_repeats": len(by_epoch),
        "reached_in_half_by_epoch": sum(r["sweep"]["reached_in_half_by_epoch"] for r in by_epoch),
        "median_epoch_ratio_by_epoch": statistics.median(epoch_ratios) if epoch_ratios else None,
        "searched_within_half_budget": sum(r["sweep"]["searched_within_half_budget"] for r in reps),
        "median_searched_epoch_fraction": statistics.median(searched) if searched else None,
        # the tuner's best came from its first iteration (= the sweep's trial 0)
        "tuner_best_is_start": sum(r["ultralytics"]["epochs_to_own_best"] == r["ultralytics"]["curve"][0][0]
                                   for r in reps),
        "rank_correlation_with_final_by_epoch": predictiveness(result),
        "hit_rate": hit_rate(result),
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    repeats = result["repeats"]
    cols = min(2, len(repeats))
    rows = -(-len(repeats) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 4.2 * rows + 0.8), dpi=110, squeeze=False)
    for ax, rep in zip(axes.flat, repeats):
        for key, label, color in (("sweep", "yolo-orch sweep (TPE + median pruning)", "tab:blue"),
                                  ("ultralytics", "Ultralytics model.tune (evolutionary)", "tab:orange")):
            pts = [(e, b) for e, b in rep[key]["curve"] if b != float("-inf")]
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=f"{label}: best so far",
                    color=color, linewidth=2)
            per_epoch = epoch_curve(rep[key])
            if per_epoch:  # the same, epoch by epoch: where a trial got there before its end
                pts = [(e, b) for e, b in per_epoch if b != float("-inf")]
                ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", color=color, linewidth=1,
                        linestyle="--", alpha=0.8)
            for t, spent in in_order(rep[key]):  # every trial at its own score
                pruned = t["state"] == "PRUNED"
                ax.scatter([spent], [t["fitness"]], color=color, s=22 if pruned else 16, alpha=0.6,
                           marker="x" if pruned else "o", zorder=3)
        ax.axhline(rep["ultralytics"]["best"], color="tab:orange", linestyle=":", linewidth=1)
        ax.set_xlabel("training epochs spent")
        ax.set_ylabel("fitness (mAP50-95 of best.pt)")
        ax.set_title(f"repeat {rep['index'] + 1} (sweep seed {rep['sweep_seed']})", fontsize=9)
        ax.grid(alpha=0.3)
    ax = axes[0][0]
    ax.plot([], [], color="grey", linestyle="--", linewidth=1, label="best so far, counted per epoch")
    ax.scatter([], [], color="grey", marker="o", s=16, label="a trial trained to the end")
    ax.scatter([], [], color="grey", marker="x", s=22, label="a pruned trial (its last epoch's value)")
    handles, labels = ax.get_legend_handles_labels()
    task = result["task"]
    start = "yolo11n fine-tuned" if task.get("pretrain") else "yolo11n from scratch"
    fig.suptitle(f"{task['images']} synthetic images, imgsz {task['imgsz']}, {start}, "
                 f"{result['budget_epochs']} epochs a side ({result['trials']} x {result['epochs_per_trial']})",
                 fontsize=10)
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3 if len(repeats) > 1 else 2, frameon=False)
    for ax in list(axes.flat)[len(repeats):]:
        ax.axis("off")
    fig.tight_layout(rect=(0, 0.8 / (4.2 * rows + 0.8) + 0.02, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def table(result: dict) -> str:
    reps = result["repeats"]
    head = "| | " + " | ".join(f"repeat {r['index'] + 1}: `model.tune` | repeat {r['index'] + 1}: sweep"
                                for r in reps) + " |"
    lines = [head, "|---|" + "---|---|" * len(reps)]

    def row(name, fn):
        cells = []
        for r in reps:
            cells += [fn(r["ultralytics"], r, "u"), fn(r["sweep"], r, "s")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    row("trials run (pruned)", lambda side, r, k: f"{len(side['trials'])} ({side['pruned']})")
    row("epochs spent", lambda side, r, k: str(side["epochs_spent"]))
    row("best fitness (mAP50-95)", lambda side, r, k: f"{side['best']:.3f}")
    row("epochs to reach the tuner's best", lambda side, r, k: str(
        side["epochs_to_own_best"] if k == "u" else side["epochs_to_ultralytics_best"] or "not reached"))

    def by_epoch(side, r, k):
        if r["sweep"].get("reached_in_half_by_epoch") is None:
            return "-"  # no per-epoch record
        if k == "u":
            return str(side["epochs_to_own_best_by_epoch"])
        return str(side["epochs_to_ultralytics_best_by_epoch"] or "not reached")

    row("the same, counted in epochs (a trial may get there before its end)", by_epoch)
    row("best of the searched trials (not trial 0)", lambda side, r, k: "-" if side["best_searched"] is None
        else f"{side['best_searched']:.3f}")
    row("epochs until a searched trial matched the tuner's best", lambda side, r, k: "-" if k == "u" else str(
        side["searched_epochs_to_ultralytics_best"] or "never"))
    row("wall time", lambda side, r, k: "-" if side.get("wall_s") is None else f"{side['wall_s']:.0f} s")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=12, help="Ultralytics tuner iterations")
    p.add_argument("--epochs", type=int, default=10, help="epochs per trial (both sides)")
    p.add_argument("--repeat", type=int, default=2, help="independent repeats (sweep sampler seeds --first-seed, +1, ...)")
    p.add_argument("--first-seed", type=int, default=0, help="the sweep sampler's seed in the first repeat")
    p.add_argument("--images", type=int, default=256)
    p.add_argument("--val-images", type=int, default=64)
    p.add_argument("--imgsz", type=int, default=128)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--startup", type=int, default=5, help="TPE startup trials (the enqueued start included)")
    p.add_argument("--startup-mode", choices=("random", "local"), default="random",
                   help="where TPE's startup trials are drawn: anywhere (runs before 2026-11-22) or near the start")
    p.add_argument("--startup-scale", type=float, help="--startup-mode local: the draws' spread (share of each range)")
    p.add_argument("--warmup-steps", type=int, default=7,
                   help="median pruner: the earliest epoch a trial can be pruned at (runs before 2026-11-21: 5)")
    p.add_argument("--pretrain", type=int, default=0, metavar="EPOCHS",
                   help="fine-tune instead of training from scratch: both sides start from the init trained "
                        "this many epochs on another generated task (seed 1, 4x --images, --pretrain-classes)")
    p.add_argument("--pretrain-classes", type=int, default=3,
                   help="classes of the pretraining task (the first N shapes; --classes above it adds new ones)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--start-lr0", type=float, default=0.002, help="lr0 of the shared starting point")
    p.add_argument("--tuner-optimizer", choices=("AdamW", "auto"), default="AdamW",
                   help="AdamW: both sides start from AdamW pinned at --start-lr0 (every run before 2026-11-22); "
                        "auto: the tuner as shipped (optimizer=auto, which ignores lr0 and momentum), the sweep "
                        "from the same training pinned (what auto resolves to)")
    p.add_argument("--tag", default="", help="suffix of the output files (bench_sweep_TAG.json/png)")
    p.add_argument("--serial", dest="parallel", action="store_false", help="run the two sides one after the other")
    p.add_argument("--work", type=Path, default=Path("/tmp/yolo-orch-bench-sweep"))
    p.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    p.add_argument("--rescore", type=Path, help="only recompute the numbers, table and plot from a result JSON")
    args = p.parse_args()
    if args.tuner_optimizer == "auto" and args.start_lr0 != p.get_default("start_lr0"):
        p.error("--start-lr0 has no effect with --tuner-optimizer auto (auto picks its own lr)")
    if args.rescore:
        result = json.loads(args.rescore.read_text())
        result["repeats"] = [dict(score(r), index=r["index"]) for r in result["repeats"]]
        write(result, args.out, stem=args.rescore.stem)  # the input's name, whatever its tag says
        return

    from orchestrator.data.synth import generate_dataset

    root = args.work / time.strftime("%Y%m%d-%H%M%S")
    data_yaml = generate_dataset(root / "data", images=args.images, val_images=args.val_images,
                                 classes=args.classes, imgsz=args.imgsz, seed=0)
    args.init = root / "init.pt"
    code, _ = run([*PLAIN, "init", str(args.init)], root / "init.log", root)
    if code != 0:
        raise SystemExit(f"could not build the initial weights; see {root / 'init.log'}")
    pretrained = None
    if args.pretrain:
        args.init, pretrained = pretrain(args, root)
    budget = args.trials * args.epochs
    print(f"work dir {root}; budget {budget} epochs a side, {args.repeat} repeat(s)", flush=True)
    result = {
        "task": {"images": args.images, "val_images": args.val_images, "imgsz": args.imgsz,
                 "classes": args.classes, "batch": args.batch, "nbs": NBS,
                 "model": "yolo11n.yaml, seed-0 init saved as init.pt (both sides)",
                 "pretrain": pretrained,
                 "device": args.device},
        "budget_epochs": budget, "trials": args.trials, "epochs_per_trial": args.epochs, "space": SPACE,
        "log_scale_in_sweep": sorted(LOG_SCALE), "base_hyp": base_hyp(args), "tuner_hyp": tuner_hyp(args),
        "start": start_point(args), "fixed": FIXED,
        "sweep_sampler": {"name": "tpe", **sampler_options(args)},
        "sweep_pruner": pruner_spec(args),
        "parallel_sides": args.parallel, "tag": args.tag, "repeats": [],
    }
    for index in range(args.repeat):
        rep = one_repeat(args, root / f"repeat{index}", data_yaml, budget, seed=args.first_seed + index)
        rep["index"] = index
        result["repeats"].append(rep)
        u, s = rep["ultralytics"], rep["sweep"]
        print(f"repeat {index + 1}: tuner best {u['best']:.4f} at {u['epochs_to_own_best']} epochs "
              f"({u['wall_s']:.0f} s); sweep best {s['best']:.4f}, tuner's best reached at "
              f"{s['epochs_to_ultralytics_best']} epochs, {len(s['trials'])} trials, {s['pruned']} pruned "
              f"({s['wall_s']:.0f} s)", flush=True)
        # after every repeat, so an interrupted run keeps the repeats it finished
        write(result, args.out, quiet=index + 1 < args.repeat)


def write(result: dict, out: Path, stem: str | None = None, quiet: bool = False) -> None:
    result["summary"] = summarize(result)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or "bench_sweep" + (f"_{result['tag']}" if result.get("tag") else "")
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    if quiet:
        return
    plot(result, out / f"{stem}.png")
    sm = result["summary"]
    print()
    print(table(result))
    print(f"\nsweep reached the tuner's best within half the tuner's epochs to it in {sm['reached_in_half']} of "
          f"{sm['repeats']} repeat(s) (median ratio {sm['median_epoch_ratio']}); the tuner's best was its "
          f"starting point in {sm['tuner_best_is_start']}; a searched sweep configuration matched or beat it "
          f"within half the budget in {sm['searched_within_half_budget']} (median fraction of the budget "
          f"{sm['median_searched_epoch_fraction']})")
    if sm["epoch_granular_repeats"]:
        print(f"counted in epochs: within half in {sm['reached_in_half_by_epoch']} of {sm['epoch_granular_repeats']} "
              f"(median ratio {sm['median_epoch_ratio_by_epoch']})")
    hr = sm["hit_rate"]
    print(f"searched sweep trials that finished at or above the tuner's best: {hr['hits']} of "
          f"{hr['searched_trials']} (p = {hr['p']:.3f}); searched trials within half the budget: "
          f"{hr['k_within_half_budget']}; independent draws would meet the target in "
          f"{hr['predicted_within_half_budget']:.1f} of {sm['repeats']} (observed {sm['searched_within_half_budget']})")
    corr = sm.get("rank_correlation_with_final_by_epoch") or {}
    if corr:
        print("rank correlation of each epoch's fitness with the final one (complete trials): "
              + ", ".join(f"epoch {k}: {v:.2f}" for k, v in corr.items() if v is not None))
    print(f"wrote {out / (stem + '.json')} and {out / (stem + '.png')}")


if __name__ == "__main__":
    main()
