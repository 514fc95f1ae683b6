#!/usr/bin/env python
"""Parity: the same job on one process and on several data-parallel processes must train the same way.

Runs the job (default examples/quickstart.yaml, default policy, same seed) on each device spec in turn
(default `cpu` then `cpu:2`), sequentially, through the real CLI (`yolo-orch submit`), then writes:

- a JSON report (final mAP50 / mAP50-95 from the best.pt validation, per-epoch losses and metrics,
  wall time, the scaler's effective values per run, and the differences),
- one matplotlib PNG with the per-epoch loss curves of every run (train box/cls/dfl, val box) and
  mAP50-95.

    python bench/parity.py                                     # runs both, ~2 x a quickstart
    python bench/parity.py --control-seed 1                    # + every device spec again with seed 1
    python bench/parity.py --replot RUN_DIR_CPU RUN_DIR_CPU2 [--control-dir DIR ...]

The control runs measure the seed-to-seed spread (data order, augmentation, initial weights): the
yardstick for the one-vs-several-processes difference. Seed 1 on one process should also start from
the same initial weights as seed 0 on several (Ultralytics seeds rank r with seed + 1 + r and DDP
broadcasts rank 0's weights; one process uses seed + 1 + RANK with RANK = -1).

Numbers in docs/distributed.md come from this script.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.rundir import load_resolved  # noqa: E402
from orchestrator.harness.cli import REPO, submit_on
from orchestrator.harness.runs import results_rows
TARGET_MAP_DIFF = 0.03


def run_job(job: Path, devices: str, runs_dir: Path, sets: list[str]) -> Path:
    started = time.time()
    result = submit_on(job, devices, runs_dir, sets)
    print(f"  {devices}: {result['state']} in {time.time() - started:.0f}s -> {result['run_dir']}", flush=True)
    return Path(result["run_dir"])


def read_run(run_dir: Path) -> dict:
    resolved = load_resolved(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = [{k: float(v) for k, v in row.items()} for row in results_rows(run_dir)]
    per_epoch = {key: [r[key] for r in rows] for key in rows[0] if key != "epoch"} if rows else {}
    m = summary["metrics"]
    return {
        "devices": resolved.plan.devices,
        "seed": resolved.plan.train_args["seed"],
        "label": f"{resolved.plan.devices} seed {resolved.plan.train_args['seed']}",
        "run_dir": str(run_dir),
        "final": {"mAP50": m.get("metrics/mAP50(B)"), "mAP50-95": m.get("metrics/mAP50-95(B)"),
                  "precision": m.get("metrics/precision(B)"), "recall": m.get("metrics/recall(B)")},
        "best_epoch_mAP50-95": max(per_epoch.get("metrics/mAP50-95(B)", [0.0])),
        "wall_time_s": summary.get("wall_time_s"),
        "effective": resolved.plan.effective,
        "per_epoch": per_epoch,
    }


def plot(runs: list[dict], path: Path, title: str, controls: list[dict] = ()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("train/box_loss", "train box loss"), ("train/cls_loss", "train cls loss"),
              ("train/dfl_loss", "train dfl loss"), ("val/box_loss", "val box loss"),
              ("val/cls_loss", "val cls loss"), ("metrics/mAP50-95(B)", "val mAP50-95")]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7), sharex=True)
    for ax, (key, label) in zip(axes.flat, panels):
        colors = {}
        for run in list(runs) + list(controls):
            ys = run["per_epoch"].get(key)
            if ys:
                eff = run["effective"]
                control = any(run is c for c in controls)
                color = colors.setdefault(run["devices"], f"C{len(colors)}")
                style = dict(ls="--", alpha=0.6, marker="x") if control else dict(marker=".")
                ax.plot(range(1, len(ys) + 1), ys, color=color, **style, label=(
                    f"{run['label']} ({eff['batch_per_device']}/dev x {eff['world_size']} x acc {eff['accumulate']})"))
        ax.set_title(label)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("epoch")
    axes[0][0].legend(fontsize=8)
    items = [f"{r['label']}: mAP50 {r['final']['mAP50']:.3f} / mAP50-95 {r['final']['mAP50-95']:.3f}"
             for r in list(runs) + list(controls)]
    finals = "\n".join(", ".join(items[i:i + 2]) for i in range(0, len(items), 2))
    fig.suptitle(f"{title}\nfinal (best.pt) {finals}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", type=Path, default=REPO / "examples" / "quickstart.yaml")
    ap.add_argument("--devices", nargs="+", default=["cpu", "cpu:2"])
    ap.add_argument("--runs-dir", type=Path, default=REPO / "runs" / "parity")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="extra job override KEY=VALUE")
    ap.add_argument("--plot", type=Path, default=REPO / "docs" / "img" / "parity_loss.png")
    ap.add_argument("--json", type=Path, default=REPO / "docs" / "parity.json")
    ap.add_argument("--control-seed", type=int, help="also run every device spec with this seed (seed spread)")
    ap.add_argument("--replot", type=Path, nargs="+", help="existing run dirs: no training, report and plot only")
    ap.add_argument("--control-dir", type=Path, nargs="+", default=[], help="with --replot: existing control runs")
    args = ap.parse_args(argv)

    run_dirs = args.replot or [run_job(args.job.resolve(), d, args.runs_dir.resolve(), args.sets) for d in args.devices]
    control_dirs = list(args.control_dir)
    if args.control_seed is not None and not control_dirs:
        control_dirs = [run_job(args.job.resolve(), d, args.runs_dir.resolve(), args.sets + [f"seed={args.control_seed}"])
                        for d in args.devices]
    runs = [read_run(Path(d)) for d in run_dirs]
    controls = [read_run(Path(d)) for d in control_dirs]
    base = runs[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    report = {
        "job": str(args.job),
        "job_yaml": args.job.read_text() if args.job.exists() else None,
        "git_commit": commit or None,
        "sets": args.sets,
        "target_mAP50-95_diff": TARGET_MAP_DIFF,
        "runs": runs,
        "differences": [
            {"devices": f"{r['devices']} - {base['devices']}",
             "mAP50": round(r["final"]["mAP50"] - base["final"]["mAP50"], 5),
             "mAP50-95": round(r["final"]["mAP50-95"] - base["final"]["mAP50-95"], 5),
             "within_target": abs(r["final"]["mAP50-95"] - base["final"]["mAP50-95"]) <= TARGET_MAP_DIFF}
            for r in runs[1:]
        ],
    }
    if controls:
        report["controls"] = controls
        pairs = [(c, r) for c in controls for r in runs if c["devices"] == r["devices"]]  # same devices, other seed
        pairs += [(c, controls[0]) for c in controls[1:]]  # other devices, control seed
        report["comparisons"] = [
            {"runs": f"{a['label']} - {b['label']}",
             "mAP50": round(a["final"]["mAP50"] - b["final"]["mAP50"], 5),
             "mAP50-95": round(a["final"]["mAP50-95"] - b["final"]["mAP50-95"], 5)} for a, b in pairs]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.json}")
    title = f"Parity: {Path(args.job).name} on {' vs '.join(r['devices'] for r in runs)}"
    plot(runs, args.plot, title + (" (solid: job seed, dashed: control seed)" if controls else " (same seed)"), controls)
    for r in runs + controls:
        print(f"{r['label']:>16}: mAP50 {r['final']['mAP50']:.4f}  mAP50-95 {r['final']['mAP50-95']:.4f}  "
              f"wall {r['wall_time_s']}s")
    for c in report.get("comparisons", []):
        print(f"{c['runs']}: mAP50 {c['mAP50']:+.4f}  mAP50-95 {c['mAP50-95']:+.4f}")
    for d in report["differences"]:
        print(f"{d['devices']}: mAP50 {d['mAP50']:+.4f}  mAP50-95 {d['mAP50-95']:+.4f}  "
              f"({'within' if d['within_target'] else 'OUTSIDE'} the {TARGET_MAP_DIFF} target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
