#!/usr/bin/env python
"""Scaling fidelity: does a scaling policy keep a training's OUTCOME when the images per optimizer step
change? (issue #20; results in docs/scaling.md and docs/benchmarks.md)

The same job is trained at the reference's images per step X (batch 16, nbs 16: X = 16) and at k x X
for each k, on ONE process (a larger batch changes X without DDP), for each optimizer and scaling
policy, and each seed. Every run goes through the real CLI (`yolo-orch submit`), so what is measured is
what the scaler passes to Ultralytics. Reported: final mAP50-95 (best.pt validation), the per-epoch
mAP50-95 curve, the scaler's passed lr0 / weight decay / warmup, and the seed spread.

    python bench/bench_scaling.py --device cpu --parallel 2                  # the full table (hours on 2 cores)
    python bench/bench_scaling.py --device 0 --parallel 8 --ks 2 4            # on a GPU machine
    python bench/bench_scaling.py --images 256 --epochs 3 --ks 2 --policies none auto --seeds 0   # smoke
    python bench/bench_scaling.py --report docs/img/bench_scaling.json        # re-print a saved table
    python bench/bench_scaling.py --task classify --images 512 --epochs 40 --ks 2 4   # another task's rows

`--task` trains that task's model (tasks.EXAMPLE_MODELS) on its generated data and reports its headline
metric (classify: top-1 accuracy; segment: mask mAP50-95; tasks.HEADLINE).

The generated task (default 2048 images at 64 px, 3 classes, 30 epochs) is one a yolo11n from scratch
learns, where even k = 8 makes hundreds of optimizer steps (2048 / 128 x 30 = 480); `--images 256`
shows the few-step regime small datasets live in. `table` (the practitioner table: scale by the device
count) changes nothing on one process: it is run anyway, as the policy a user would pick.
"""

from __future__ import annotations

import argparse
import collections
import functools
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import yaml

from orchestrator.doctor.cpu import cpuinfo_fields  # noqa: E402
from orchestrator.rundir import load_resolved  # noqa: E402
from orchestrator.scaling import stats  # noqa: E402
from orchestrator.tasks import EXAMPLE_MODELS, HEADLINE, TASKS  # noqa: E402
from orchestrator.harness.cli import COMMAND, REPO
from orchestrator.harness.runs import results_column
POLICIES = ("none", "auto", "linear", "sqrt", "table", "lr0-sqrt", "auto-warmup-kept", "linear-warmup-kept")
# Arms that are no policy of the scaler: (the policy, lr0's exponent of k, scaling.warmup). lr0-sqrt passes
# lr0 x sqrt(k) and keeps the weight decay per epoch with the k-rules' warmup: `linear` on a reference with
# lr0 x sqrt(k) and weight decay / sqrt(k); it is what `auto` passed for SGD from scratch on a GPU before
# issue #48 (lr0 0.0283 at k = 8), trainable on any device (docs/scaling-campaigns.md 7G4). The -warmup-kept arms are
# the policy with the reference's warmup (scaling.warmup: keep).
ARMS = {"lr0-sqrt": ("linear", 0.5, "auto"), "auto-warmup-kept": ("auto", 0.0, "keep"),
        "linear-warmup-kept": ("linear", 0.0, "keep")}
# MuSGD: what optimizer=auto picks above 10,000 iterations on Ultralytics 8.4 (lr0 0.01, momentum 0.9)
OPTIMIZERS = {"SGD": {"lr0": 0.01, "momentum": 0.937}, "AdamW": {"lr0": 0.001, "momentum": 0.9},
              "MuSGD": {"lr0": 0.01, "momentum": 0.9}}
DEFAULT_OPTIMIZERS = ("SGD", "AdamW")
# Ultralytics' classify augmentations (random erasing, RandAugment) hide a shape this small (docs/tasks.md)
TASK_OVERRIDES = {"classify": {"erasing": 0.0, "auto_augment": None}}


def metric_key(task: str) -> str:
    return HEADLINE[task][-1][1]


def job_for(args, optimizer: str) -> dict:
    """The reference job: batch B with nbs B (X = B, 16 unless --ref-batch), the optimizer pinned (auto
    would ignore lr0)."""
    return {
        "name": f"fidelity-{args.task}-{optimizer.lower()}",
        "model": EXAMPLE_MODELS[args.task],
        "data": {"synth": {"images": args.images, "val_images": args.val_images, "classes": 3,
                           "imgsz": args.imgsz, "seed": 7}},
        "epochs": args.epochs,
        "imgsz": args.imgsz,
        "deterministic": True,
        "hyp": {"preset": "scratch-default", "optimizer": optimizer, "weight_decay": 0.0005,
                "warmup_epochs": 3.0, **OPTIMIZERS[optimizer]},
        "reference": {"devices": 1, "batch": args.ref_batch, "nbs": args.ref_batch},
        "target": {"devices": args.device, "batch": args.ref_batch},
        "wandb": {"mode": "disabled"},
        "overrides": {"workers": args.workers, "plots": False, **TASK_OVERRIDES.get(args.task, {})},
    }


def cell_overrides(job: Path, ref_batch: int, k: int, policy: str, seed: int) -> list[str]:
    """The `--set`s that make the reference job in `job` one cell: seed, target batch, policy (or arm)."""
    sets = [f"seed={seed}", f"target.batch={ref_batch * k}"]
    if policy in ARMS:
        policy, e, warmup = ARMS[policy]
        hyp = yaml.safe_load(job.read_text())["hyp"]
        sets += [f"hyp.lr0={hyp['lr0'] * k ** e!r}", f"hyp.weight_decay={hyp['weight_decay'] / k ** e!r}"] if e else []
        sets += [f"scaling.warmup={warmup}"]
    return [x for s in [*sets, f"scaling.policy={policy}"] for x in ("--set", s)]


def training_key(args, optimizer: str, k: int, policy: str, seed: int) -> tuple:
    """What Ultralytics will really train with for this cell (from `yolo-orch plan`, no torch): two
    policies that pass the same effective values are one training, run once and reported for both
    (e.g. AdamW auto and sqrt; SGD linear and none at k = 2, where they differ only in how nbs and
    the passed weight decay split the same optimizer weight decay)."""
    job = args.work / f"{optimizer}.yaml"
    out = subprocess.run([*COMMAND, "plan", str(job), "--json",
                          *cell_overrides(job, args.ref_batch, k, policy, seed)], cwd=REPO, capture_output=True,
                         text=True, check=True)
    eff = json.loads(out.stdout)[0]["effective"]
    return (optimizer, seed, *(eff[x] for x in ("batch", "accumulate", "lr0", "momentum", "weight_decay",
                                                "warmup_epochs", "warmup_bias_lr")))


def train(args, work: Path, optimizer: str, k: int, policy: str, seed: int) -> dict:
    job = work / f"{optimizer}.yaml"
    runs = work / "runs" / f"{optimizer}-k{k}-{policy}-s{seed}"
    cmd = [*COMMAND, "submit", str(job), "--json", "--set", f"runs_dir={runs}",
           *cell_overrides(job, args.ref_batch, k, policy, seed)]
    started = time.time()
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    wall = time.time() - started
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-3:]
        print(f"  FAILED {optimizer} k={k} {policy} seed {seed}: {' | '.join(tail)}", flush=True)
        return {"optimizer": optimizer, "k": k, "policy": policy, "seed": seed, "failed": "\n".join(tail)}
    run_dir = Path(json.loads(out.stdout)["run_dir"])
    row = read_run(run_dir, args.task)
    row.update(optimizer=optimizer, k=k, policy=policy, seed=seed, wall_s=round(wall, 1), machine=machine(args.device))
    print(f"  {optimizer:5} k={k} {policy:6} seed {seed}: {metric_key(args.task)} {row['final']:.4f}  "
          f"(lr0 {row['passed']['lr0']:.4g}, X {row['effective']['images_per_step']}, "
          f"{row['effective']['optimizer_steps_per_epoch']} steps/epoch, clipped {row['clipping']['fraction']}, "
          f"{wall:.0f} s)", flush=True)
    return row


@functools.cache
def machine(device: str) -> str:
    """Which machine trained a row (a CPU of another make gives other metrics): the CPU's model name, family
    and model from /proc/cpuinfo (KVM often names only the make), its cores and, on a GPU, the GPU's name."""
    fields = cpuinfo_fields()
    cpu = fields.get("model name", platform.processor() or "unknown CPU")
    if "cpu family" in fields:
        cpu += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    cpu += f", {os.cpu_count()} cores"
    if device == "cpu":
        return cpu
    import torch

    return f"{torch.cuda.get_device_name(int(device.split(',')[0]))}; {cpu}"


def read_run(run_dir: Path, task: str = "detect") -> dict:
    plan = load_resolved(run_dir).plan
    summary = json.loads((run_dir / "summary.json").read_text())
    key = metric_key(task)
    curve = results_column(run_dir, key)
    passed, eff = plan.passed, plan.effective
    return {
        "final": float(summary["metrics"][key]),
        "curve": curve,
        "passed": {k: passed[k] for k in ("optimizer", "batch", "nbs", "lr0", "momentum", "weight_decay",
                                          "warmup_epochs")},
        "effective": {k: eff.get(k) for k in ("images_per_step", "accumulate", "weight_decay",
                                             "optimizer_steps_per_epoch", "warmup_iterations")},
        "reasons": plan.reasons,
        "clipping": clipping(run_dir),
    }


def clipping(run_dir: Path) -> dict:
    """How often Ultralytics' fixed gradient clip (max_norm 10) bound, from the epoch events
    (worker/grad_norm.py): the share of all optimizer steps, and per epoch the share, mean and max norm."""
    epochs = [e["metrics"] for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
              if e.get("event") == "epoch" and "train/clip_fraction" in e.get("metrics", {})]
    per_epoch = {"fraction": [m["train/clip_fraction"] for m in epochs],
                 "norm_mean": [m["train/grad_norm"] for m in epochs],
                 "norm_max": [m["train/grad_norm_max"] for m in epochs]}
    overall = round(statistics.mean(per_epoch["fraction"]), 4) if epochs else None
    return {"fraction": overall, "max_norm": 10.0, "per_epoch": per_epoch}


def policies_in(rows: list[dict]) -> list[str]:
    """The policies present, in POLICIES order; other labels (a saved file's legacy rules) after them."""
    found = {r["policy"] for r in rows}
    return [p for p in POLICIES if p in found] + sorted(found - set(POLICIES))


def summarize(rows: list[dict]) -> dict:
    """Per (optimizer, k, policy): n, the mean final mAP50-95 (best.pt) and last epoch's, min..max over
    seeds, and the gap to the reference paired by seed and machine, with its 95 % interval (stats.py;
    k = 1: every policy is the reference there)."""
    ok = [r for r in rows if "final" in r]
    out: dict = {}
    for opt in sorted({r["optimizer"] for r in ok}):
        refs = {(r["seed"], r.get("machine")): r["final"] for r in ok if r["optimizer"] == opt and r["k"] == 1}
        ref = list(refs.values())
        out[opt] = {"reference": {"mean": statistics.mean(ref) if ref else None, "min": min(ref, default=None),
                                  "max": max(ref, default=None), "n": len(ref)}, "cells": {}}
        for k in sorted({r["k"] for r in ok if r["optimizer"] == opt and r["k"] != 1}):
            for policy in policies_in(ok):
                cell = [r for r in ok if (r["optimizer"], r["k"], r["policy"]) == (opt, k, policy)]
                if cell:
                    out[opt]["cells"][f"k{k}-{policy}"] = _cell_summary(k, policy, cell, refs)
    return out


def _cell_summary(k: int, policy: str, cell: list[dict], refs: dict) -> dict:
    vals = [r["final"] for r in cell]
    paired = [r["final"] - refs[r["seed"], r.get("machine")] for r in cell if (r["seed"], r.get("machine")) in refs]
    gap = stats.mean_interval(paired).as_json() if paired else None
    return {"k": k, "policy": policy, "mean": round(statistics.mean(vals), 4), "min": min(vals), "max": max(vals),
            "last_mean": round(statistics.mean(r["curve"][-1] for r in cell), 4) if all(r.get("curve") for r in cell)
            else None, "n": len(vals), "gap_to_reference": gap}


def merge(saved: list[dict]) -> dict:
    """Several saved results as one: their runs together, the summary recomputed over all of them (each
    optimizer's gaps against its own references), each file's command and wall time kept. Runs of a file
    trained for other epochs than the first file's are their own cells ("auto, 60 epochs")."""
    if len(saved) == 1:
        return {**saved[0], "summary": summarize(saved[0]["runs"])}  # this version's statistics
    epochs = saved[0]["task"]["epochs"]
    runs = [r if s["task"]["epochs"] == epochs or "epochs" in r["policy"]
            else {**r, "policy": f"{r['policy']}, {s['task']['epochs']} epochs"} for s in saved for r in s["runs"]]
    return {**saved[0], "command": None, "commands": [s.get("command") for s in saved],
            "wall_s": [s.get("wall_s") for s in saved], "runs": runs, "summary": summarize(runs)}


def print_table(summary: dict) -> None:
    for opt, block in summary.items():
        ref = block["reference"]
        ref_text = "-" if ref["mean"] is None else f"{ref['mean']:.4f} ({ref['min']:.4f}..{ref['max']:.4f})"
        print(f"\n{opt}: reference (k = 1) {ref_text}")
        width = max([7, *(len(cell["policy"]) for cell in block["cells"].values())])
        print(f"  {'k':>2} {'policy':{width}} {'best.pt':>7} {'last':>7} {'seeds min..max':>16}  gap, paired by seed (95 %)")
        for cell in block["cells"].values():
            gap = cell["gap_to_reference"]
            gap_text = stats.Interval.from_json(gap).text() if isinstance(gap, dict) else "-"
            last = "-" if cell.get("last_mean") is None else f"{cell['last_mean']:.4f}"
            print(f"  {cell['k']:>2} {cell['policy']:{width}} {cell['mean']:>7.4f} {last:>7} "
                  f"{cell['min']:>7.4f}..{cell['max']:<7.4f}  {gap_text}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="detect", choices=TASKS, help="the task trained (its model and data)")
    ap.add_argument("--device", default="cpu", help="target devices of every run: cpu, or one GPU such as 0")
    ap.add_argument("--optimizers", nargs="+", default=list(DEFAULT_OPTIMIZERS), choices=list(OPTIMIZERS))
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--ks", nargs="+", type=int, default=[2, 4, 8], help="images-per-step multiples besides 1")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--val-images", type=int, default=256)
    ap.add_argument("--imgsz", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--ref-batch", type=int, default=16,
                    help="the reference's batch (= its nbs: its images per step); k = 8 keeps 960 steps with "
                         "--ref-batch 8 at the default images and epochs")
    ap.add_argument("--workers", type=int, default=2, help="Ultralytics loader workers per run (GPU runs)")
    ap.add_argument("--parallel", type=int, default=2, help="trainings at a time")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench_scaling")
    ap.add_argument("--out", type=Path, help="the results JSON (default docs/img/bench_scaling.json); with "
                                             "--report: write the merged results there")
    ap.add_argument("--skip-reference", action="store_true", help="no k = 1 runs (another invocation has them)")
    ap.add_argument("--report", type=Path, nargs="+",
                    help="only print the table of saved results JSONs (several: merged, e.g. one per optimizer)")
    ap.add_argument("--plot", type=Path, help="with --report: draw the per-epoch curves to this PNG")
    ap.add_argument("--plot-clipping", type=Path,
                    help="with --report: draw each run's gradient norm and clipped share per epoch to this PNG")
    args = ap.parse_args(argv)
    if args.report:
        saved = merge([json.loads(path.read_text()) for path in args.report])
        print_table(saved["summary"])
        machines = collections.Counter(r.get("machine", "not recorded") for r in saved["runs"])
        print("\nmachines: " + "; ".join(f"{name}: {n} runs" for name, n in machines.items()))
        if args.out:
            args.out.write_text(json.dumps(saved, indent=1) + "\n")
            print(f"wrote {args.out}")
        if args.plot:
            plot_curves(saved, args.plot)
            print(f"wrote {args.plot}")
        if args.plot_clipping:
            plot_clipping(saved, args.plot_clipping)
            print(f"wrote {args.plot_clipping}")
        return 0

    args.out = args.out or REPO / "docs" / "img" / "bench_scaling.json"
    args.work.mkdir(parents=True, exist_ok=True)
    for opt in args.optimizers:
        (args.work / f"{opt}.yaml").write_text(yaml.safe_dump(job_for(args, opt), sort_keys=False))
    # k = 1 once per optimizer and seed (every policy is the reference there), then the grid
    grid = [] if args.skip_reference else [(opt, 1, "none", s) for opt in args.optimizers for s in args.seeds]
    # seed-major: a benchmark cut short (a device call's limit) leaves whole seeds, each paired across policies
    grid += [(opt, k, p, s) for opt, k, s, p in itertools.product(args.optimizers, args.ks, args.seeds, args.policies)]
    started = time.time()
    command = "python bench/bench_scaling.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = run_grid(args, grid, lambda rows: save(args, command, rows, started))
    print_table(summarize(rows))
    print(f"\nwrote {args.out}")
    return 0


def run_grid(args, grid: list[tuple], save_rows) -> list[dict]:
    """Train the cells of `grid` (optimizer, k, policy, seed), `args.parallel` at a time, each distinct
    training once, and return a row per cell; `save_rows(rows)` after every run, so that an interrupted
    benchmark keeps what it did (also bench_finetune.py's)."""
    same: dict[tuple, list[tuple]] = {}  # one training per distinct set of effective values
    for g in grid:
        same.setdefault(training_key(args, *g), []).append(g)
    print(f"{len(grid)} cells, {len(same)} distinct trainings, {args.parallel} at a time, on {args.device}",
          flush=True)
    rows: list[dict] = []
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = {pool.submit(train, args, args.work, *cells[0]): cells for cells in same.values()}
        for future in as_completed(futures):
            row = future.result()
            rows.append(row)
            rows += [{**row, "k": k, "policy": policy, "seed": seed, "same_training_as": row["policy"]}
                     for _, k, policy, seed in futures[future][1:]]
            save_rows(rows)
    return rows


def plot_curves(saved: dict, path: Path) -> None:
    """One panel per (optimizer, k): each policy's per-epoch mAP50-95, mean over seeds (band: min..max),
    against the reference's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aliases: dict[tuple, list[str]] = {}  # a training reported for several policies: one curve, all names
    for r in saved["runs"]:
        if r.get("same_training_as"):
            aliases.setdefault((r["optimizer"], r["k"], r["same_training_as"]), []).append(r["policy"])
    runs = [r for r in saved["runs"] if "curve" in r and not r.get("same_training_as")]
    panels = sorted({(r["optimizer"], r["k"]) for r in runs if r["k"] != 1})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False, sharey=True)
    for ax, (opt, k) in zip(axes[0], panels):
        groups = [("reference (k = 1)", [r for r in runs if (r["optimizer"], r["k"]) == (opt, 1)], "k")]
        groups += [(" = ".join([p, *aliases.get((opt, k, p), [])]),
                    [r for r in runs if (r["optimizer"], r["k"], r["policy"]) == (opt, k, p)], None)
                   for p in policies_in(runs)]
        for label, rs, color in groups:
            if not rs:
                continue
            curves = [r["curve"] for r in rs]
            n = min(len(c) for c in curves)
            mean = [statistics.mean(c[i] for c in curves) for i in range(n)]
            epochs = range(1, n + 1)
            line = ax.plot(epochs, mean, label=label, color=color, lw=2 if color else 1.2)[0]
            ax.fill_between(epochs, [min(c[i] for c in curves) for i in range(n)],
                            [max(c[i] for c in curves) for i in range(n)], color=line.get_color(), alpha=0.12)
        ax.set_title(f"{opt}, k = {k}")
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")  # per panel: optimizers may have run different policies
    axes[0][0].set_ylabel("val mAP50-95")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_clipping(saved: dict, path: Path) -> None:
    """Per run: the mean gradient norm before clipping per epoch (log scale, Ultralytics' max_norm drawn)
    and the share of the epoch's optimizer steps that the clip shortened."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in saved["runs"] if r.get("clipping", {}).get("per_epoch", {}).get("norm_mean")
            and not r.get("same_training_as")]
    fig, (norms, shares) = plt.subplots(1, 2, figsize=(11, 3.8))
    colours: dict[tuple, tuple] = {}  # one colour and one legend entry per (optimizer, k, policy): seeds alike
    for r in runs:
        per_epoch = r["clipping"]["per_epoch"]
        group = (r["optimizer"], r["k"], r["policy"] if r["k"] != 1 else "reference")
        label = None if group in colours else f"{group[0]} k = {group[1]} {group[2]}"
        colours.setdefault(group, plt.cm.tab20(len(colours) % 20))
        style = "-" if len({g[0] for g in colours}) < 2 or group[0] == runs[0]["optimizer"] else "--"
        epochs = range(1, len(per_epoch["norm_mean"]) + 1)
        norms.plot(epochs, per_epoch["norm_mean"], label=label, color=colours[group], ls=style, lw=1.1)
        shares.plot(epochs, per_epoch["fraction"], color=colours[group], ls=style, lw=1.1)
    norms.axhline(runs[0]["clipping"]["max_norm"] if runs else 10.0, color="k", ls="--", lw=1, label="max_norm")
    norms.set_yscale("log")
    norms.set_title("gradient norm before clipping (epoch mean)")
    shares.set_title("share of optimizer steps clipped")
    shares.set_ylim(-0.02, 1.02)
    for ax in (norms, shares):
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
    fig.legend(*norms.get_legend_handles_labels(), fontsize=7, loc="center right")
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.savefig(path, dpi=110)


def save(args, command: str, rows: list[dict], started: float) -> None:
    rows = sorted(rows, key=lambda r: (r["optimizer"], r["k"], policies_in(rows).index(r["policy"]), r["seed"]))
    result = {
        "command": command,
        "task": {"images": args.images, "val_images": args.val_images, "imgsz": args.imgsz, "epochs": args.epochs,
                 "classes": 3, "model": f"{EXAMPLE_MODELS[args.task]} (from scratch)", "task": args.task,
                 "metric": metric_key(args.task), "reference": {"batch": args.ref_batch, "nbs": args.ref_batch},
                 "overrides": TASK_OVERRIDES.get(args.task, {})},
        "device": args.device, "wall_s": round(time.time() - started), "runs": rows, "summary": summarize(rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
