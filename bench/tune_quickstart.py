#!/usr/bin/env python
"""Measure how fast yolo11n (from yaml, no weights) learns the synthetic shapes set on CPU.

Used to pick the quickstart job's training settings. Plain Ultralytics, no orchestrator.

    YOLO_OFFLINE=1 python bench/tune_quickstart.py --name base \
        --set epochs=30 mosaic=1.0 close_mosaic=10 --out /tmp/synth-tune/results.jsonl

Prints and appends one JSON line per run: the settings, wall time of `train()`
(model build + training + final validation), per-epoch (time, mAP50, mAP50-95) and
the final metrics of best.pt.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import resource
import time
from pathlib import Path


from orchestrator.data.synth import generate_dataset  # noqa: E402

BASE = dict(
    epochs=30,
    imgsz=128,
    batch=16,
    optimizer="AdamW",
    lr0=0.002,
    workers=2,
    plots=False,
    amp=False,
    device="cpu",
    seed=0,
    deterministic=True,
    val=True,
    verbose=False,
)


def _parse(kv: list[str]) -> dict:
    out = {}
    for item in kv:
        k, _, v = item.partition("=")
        try:
            out[k] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k] = v
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--set", nargs="*", default=[], help="Ultralytics train args key=value")
    ap.add_argument("--data-root", default="/tmp/synth-tune/data")
    ap.add_argument("--images", type=int, default=128)
    ap.add_argument("--val-images", type=int, default=32)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--synth", nargs="*", default=[], help="experimental synth module constants, e.g. _NOISE_SIGMA=8")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (Ultralytics sets cpu_count-1)")
    ap.add_argument("--out", default="/tmp/synth-tune/results.jsonl")
    a = ap.parse_args()

    os.environ.setdefault("YOLO_OFFLINE", "1")
    from orchestrator.data import synth  # noqa: PLC0415

    overrides = _parse(a.synth)
    for k, v in overrides.items():
        assert hasattr(synth, k), k
        setattr(synth, k, v)
    tag = "".join(f"-{k.strip('_').lower()}{v}" for k, v in sorted(overrides.items()))
    t0 = time.perf_counter()
    data = generate_dataset(
        Path(a.data_root) / f"n{a.images}-v{a.val_images}-c{a.classes}-s{a.data_seed}{tag}",
        images=a.images, val_images=a.val_images, classes=a.classes, imgsz=128, seed=a.data_seed,
    )
    t_data = time.perf_counter() - t0

    from ultralytics import YOLO  # noqa: PLC0415

    args = {**BASE, **_parse(a.set)}
    epochs_log: list[dict] = []
    load0 = [round(x, 2) for x in os.getloadavg()]
    t_start = time.perf_counter()

    def on_fit_epoch_end(trainer):
        m = trainer.metrics or {}
        epochs_log.append(
            dict(
                epoch=trainer.epoch + 1,
                t=round(time.perf_counter() - t_start, 1),
                map50=round(float(m.get("metrics/mAP50(B)", float("nan"))), 4),
                map=round(float(m.get("metrics/mAP50-95(B)", float("nan"))), 4),
            )
        )

    model = YOLO("yolo11n.yaml")
    if a.threads:
        import torch  # noqa: PLC0415

        # Ultralytics' select_device() sets torch threads to cpu_count-1 (1 on 2 cores).
        def set_threads(trainer):
            torch.set_num_threads(a.threads)

        model.add_callback("on_pretrain_routine_start", set_threads)
        model.add_callback("on_train_epoch_start", set_threads)
    model.add_callback("on_fit_epoch_end", on_fit_epoch_end)
    project = Path("/tmp/synth-tune/runs")
    res = model.train(data=str(data), project=str(project), name=a.name, exist_ok=True, **args)
    wall = time.perf_counter() - t_start
    ru_s, ru_c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru_s.ru_utime + ru_s.ru_stime + ru_c.ru_utime + ru_c.ru_stime
    rd = getattr(res, "results_dict", {}) or {}
    first90 = next((e for e in epochs_log if e["map50"] >= 0.9), None)
    rec = dict(
        name=a.name,
        args={k: v for k, v in args.items() if k not in ("verbose",)},
        threads=a.threads,
        data=dict(images=a.images, val_images=a.val_images, classes=a.classes, seed=a.data_seed, synth=overrides),
        data_s=round(t_data, 2),
        wall_s=round(wall, 1),
        cpu_s=round(cpu, 1),  # whole process incl. dataloader workers; less noisy than wall
        load_before=load0,
        load_after=[round(x, 2) for x in os.getloadavg()],
        map50=round(float(rd.get("metrics/mAP50(B)", float("nan"))), 4),
        map=round(float(rd.get("metrics/mAP50-95(B)", float("nan"))), 4),
        first_epoch_map50_ge_0_9=first90,
        epochs=epochs_log,
    )
    line = json.dumps(rec)
    print(line)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "a") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
