"""Measure compile count and step time of the XLA backend on the synthetic dataset.

    PJRT_DEVICE=CPU python -m bench.xla_step --model yolo11n.yaml --imgsz 128 --batch 4

Generates (or reuses) a synth-shapes dataset, trains ``--epochs`` epochs (default 2) with
``train_xla`` (accumulate 1, no warmup: one step graph) and prints the ``xla/*`` statistics as
JSON, with the graphs compiled in each epoch (``xla/compiles_per_epoch``: after the first epoch
a fixed-shape step should compile nothing). ``--json-out`` also writes them to a file
(docs/bench/xla.json, which bench/bench.py quotes). The numbers in docs/tpu.md come from this
command.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.xla_step")
    p.add_argument("--model", default="yolo11n.yaml")
    p.add_argument("--imgsz", type=int, default=128)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--images", type=int, default=32, help="train images (steps = images // batch)")
    p.add_argument("--max-boxes", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--json-out", type=Path, default=None, help="also write the JSON here")
    p.add_argument("--out", type=Path, default=None, help="work dir (default: a temp dir)")
    ns = p.parse_args(argv)

    os.environ.setdefault("YOLO_OFFLINE", "1")
    from orchestrator.data.synth import generate_dataset

    from orchestrator.worker.xla.metrics import compile_count
    from orchestrator.worker.xla.run import train_xla

    out = ns.out or Path(tempfile.mkdtemp(prefix="xla_bench_"))
    data = generate_dataset(out / "ds", images=ns.images, val_images=4, classes=3, imgsz=max(64, ns.imgsz), seed=0)
    args = dict(
        model=ns.model, data=str(data), epochs=ns.epochs, imgsz=ns.imgsz, batch=ns.batch, nbs=ns.batch, optimizer="SGD",
        lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=0.0005, warmup_epochs=0, seed=0, workers=0, plots=False,
        close_mosaic=0, val=True,
    )
    counts: list[int] = []  # cumulative compile count at the start of training and after each epoch
    # (after its validation and checkpoint: the EMA copy to the host is part of the epoch)

    def mark(trainer) -> None:
        counts.append(compile_count())

    t = time.perf_counter()
    r = train_xla(args, out / "run", max_boxes=ns.max_boxes, bf16=ns.bf16,
                  callbacks={"on_train_start": [mark], "on_fit_epoch_end": [mark]})
    summary = {
        "model": ns.model, "imgsz": ns.imgsz, "batch": ns.batch, "bf16": ns.bf16,
        "device": os.environ.get("PJRT_DEVICE", "default"), "host": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "wall_s": round(time.perf_counter() - t, 1),
        **{k: v for k, v in r.items() if k.startswith("xla/") and k != "xla/batch_boxes"},
        "boxes_per_step": r.get("xla/batch_boxes", [])[: r.get("xla/train_steps", 0)],
        "epochs": ns.epochs,
        # on_fit_epoch_end also runs once for the final validation of best.pt: epochs only
        "xla/compiles_per_epoch": [b - a for a, b in zip(counts, counts[1:])][: ns.epochs],
    }
    print(json.dumps(summary))
    if ns.json_out:
        ns.json_out.parent.mkdir(parents=True, exist_ok=True)
        ns.json_out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
