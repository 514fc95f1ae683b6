#!/usr/bin/env python
"""How well could a pruner tell trials apart at epoch k? For every trial trained to the end in
the work folders of `bench/bench_sweep.py`, the rank correlation (Spearman) of a per-epoch
signal at epoch k with the trial's final score (its best mAP50-95), for several signals: the
validation mAP (what the sweep reports to the pruner) and the validation losses. The losses
are read from results.csv, where Ultralytics has already multiplied them by the box / cls /
dfl gains; since box and cls are searched, they are also shown divided by the trial's gains.

    python bench/pruning_signal.py /tmp/yolo-orch-bench-sweep/20261122-032918 [more work dirs]

A pruner deciding at an epoch where a signal's correlation is low cuts trials that would
have finished well (docs/sweeps.md, "Where to prune").
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench_sweep import read_sweep, read_ultralytics, rank_correlation  # the benchmark's own readers
from orchestrator.harness.runs import results_rows

DFL_GAIN = 1.5  # Ultralytics' default; not searched by the benchmark


def read_curve(results_csv: Path) -> list[dict[str, float]]:
    return [{k: float(v) for k, v in row.items()} for row in results_rows(results_csv)]


def complete_curves(work: Path) -> list[tuple[list[dict[str, float]], float, float]]:
    """(per-epoch rows, box gain, cls gain) of every trial of both sides that ran all its epochs."""
    trials = []
    for repeat in sorted(work.glob("repeat*")):  # a repeat may have been stopped before either side wrote
        if (repeat / "ultralytics" / "tune" / "tune_results.ndjson").exists():
            trials += read_ultralytics(repeat / "ultralytics", epochs=None)["trials"]
        if (repeat / "sweep" / "runs" / "sweeps" / "bench" / "summary.json").exists():
            trials += read_sweep(repeat / "sweep")["trials"]
    found = []
    for t in trials:
        results = Path(t["run_dir"]) / "results.csv" if t.get("run_dir") else None
        if t["state"] == "COMPLETE" and results is not None and results.exists():
            params = {k.removeprefix("hyp."): v for k, v in t["params"].items()}  # the sweep's are "hyp.box"
            found.append((read_curve(results), params.get("box", 7.5), params.get("cls", 0.5)))
    return found


def signals(row: dict[str, float], box: float, cls: float) -> dict[str, float]:
    """Higher is better for every signal (losses negated)."""
    return {
        "mAP50-95": row["metrics/mAP50-95(B)"],
        "mAP50": row["metrics/mAP50(B)"],
        "-val loss (as logged)": -(row["val/box_loss"] + row["val/cls_loss"] + row["val/dfl_loss"]),
        "-val loss / gains": -(row["val/box_loss"] / box + row["val/cls_loss"] / cls + row["val/dfl_loss"] / DFL_GAIN),
        "-val box loss / box": -row["val/box_loss"] / box,
        "-val cls loss / cls": -row["val/cls_loss"] / cls,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("work", nargs="+", type=Path, help="bench_sweep.py work folders (the timestamped ones)")
    args = p.parse_args()
    for work in args.work:
        if not work.is_dir():
            p.error(f"{work}: no such folder (expected a bench_sweep.py work folder)")

    curves = [c for work in args.work for c in complete_curves(work)]
    epochs = min((len(rows) for rows, _, _ in curves), default=0)
    curves = [c for c in curves if len(c[0]) == epochs]
    if len(curves) < 4:
        p.error(f"need at least 4 complete trials of equal length in {', '.join(map(str, args.work))}, found {len(curves)}")
    final = [max(r["metrics/mAP50-95(B)"] for r in rows) for rows, _, _ in curves]
    names = list(signals(curves[0][0][0], curves[0][1], curves[0][2]))
    print(f"{len(curves)} complete trials of {epochs} epochs; Spearman rank correlation with the final score")
    print("| epoch | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for k in range(epochs - 1):
        values = [signals(rows[k], box, cls) for rows, box, cls in curves]
        cells = []
        for name in names:
            rho = rank_correlation([v[name] for v in values], final)
            cells.append("-" if rho is None else f"{rho:.2f}")
        print(f"| {k + 1} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
