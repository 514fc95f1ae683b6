#!/usr/bin/env python
"""Scaling fidelity when FINE-TUNING (issue #33; results in docs/scaling-campaigns.md section 7H): does a scaling
policy keep a fine-tuning's outcome when the images per optimizer step grow k-fold?

Most users start from pretrained weights and train their own data briefly. COCO weights cannot be
downloaded here, so the bench makes its own stand-in once and caches it: yolo11n trained from scratch on
the default generated domain (rectangles, ellipses, triangles and crosses on gradient backgrounds, any
colour). The fine-tuning data is another domain: other shapes (stars, diamonds, rings), other
backgrounds (hard-edged stripes), other colours (saturated), another class count (data/synth.py's
`first_class` and `style`). Each fine-tuning goes through the real CLI (`yolo-orch submit`, the job's
`model` the cached weights), at the reference's images per step (batch 8, nbs 8) and at k x that, for
the optimizer `optimizer=auto` picks there (AdamW with its lr fit for a schedule this short) and SGD,
with the policies `none` and `auto`, over the seeds. The rows and the table are bench_scaling.py's.

    python bench/bench_finetune.py --device cpu --parallel 2                  # the table (about 1 h on 2 cores)
    python bench/bench_finetune.py --pretrain-only                            # only the cached stand-in
    python bench/bench_finetune.py --device 0 --parallel 8 --cache runs/finetune-cache   # a GPU machine
    python bench/bench_finetune.py --pretrain-epochs 2 --images 64 --epochs 2 --ks 2 --seeds 0   # smoke
    python bench/bench_scaling.py --report docs/img/bench_finetune_cpu.json --plot docs/img/bench_finetune_cpu.png
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

import bench_scaling  # noqa: E402
from orchestrator.data.synth import generate_dataset  # noqa: E402
from orchestrator.harness.cli import COMMAND, REPO

# The pretraining domain (the default look; the first 4 shapes) and the fine-tuning one (3 other shapes,
# striped backgrounds, saturated colours): what a COCO model meets in a user's own data, in small.
PRETRAIN_DATA = {"classes": 4, "seed": 1}
FINETUNE_DATA = {"classes": 3, "first_class": 4, "style": "striped", "seed": 2}
# Ultralytics' scratch defaults for the stand-in's pretraining (SGD, lr0 0.01), batch 32
PRETRAIN_HYP = {"optimizer": "SGD", "lr0": 0.01, "momentum": 0.937, "weight_decay": 0.0005, "warmup_epochs": 3.0}
# The fine-tunings: what optimizer=auto picks for a short schedule (the job leaves it on auto: the scaler
# resolves and pins it), SGD at Ultralytics' default lr0, and MuSGD as auto gives it above 10,000 iterations
# (lr0 0.01, momentum 0.9: bench_scaling's; docs/scaling.md 7J)
OPTIMIZERS = {"auto": {"optimizer": "auto"}, "SGD": {"optimizer": "SGD", "lr0": 0.01, "momentum": 0.937},
              "MuSGD": {"optimizer": "MuSGD", **bench_scaling.OPTIMIZERS["MuSGD"]}}


def pretrain_job(args) -> dict:
    return {
        "name": "finetune-stand-in",
        "model": "yolo11n.yaml",
        "data": {"synth": {"images": args.pretrain_images, "val_images": args.val_images, "imgsz": args.imgsz,
                           **PRETRAIN_DATA}},
        "epochs": args.pretrain_epochs, "imgsz": args.imgsz, "seed": 0, "deterministic": True,
        "hyp": {"preset": "scratch-default", **PRETRAIN_HYP},
        "reference": {"devices": 1, "batch": 32, "nbs": 32},
        "target": {"devices": args.device, "batch": 32},
        "scaling": {"policy": "none"},
        "wandb": {"mode": "disabled"},
        "overrides": {"workers": args.workers, "plots": False},
    }


def pretrained_weights(args) -> tuple[Path, dict]:
    """The stand-in for COCO weights: trained once per pretraining job and kept under --cache (a copy of
    its best.pt and what it scored); the same job finds it there again, on this machine or a GPU's."""
    job = pretrain_job(args)
    key = hashlib.sha256(json.dumps({**job, "target": None, "overrides": None}, sort_keys=True).encode()).hexdigest()
    weights, info = args.cache / f"pretrained-{key[:12]}.pt", args.cache / f"pretrained-{key[:12]}.json"
    if weights.is_file() and info.is_file():
        return weights, json.loads(info.read_text())
    args.cache.mkdir(parents=True, exist_ok=True)
    job_path = args.cache / f"pretrain-{key[:12]}.yaml"
    job_path.write_text(yaml.safe_dump(job, sort_keys=False))
    print(f"pretraining the stand-in: {args.pretrain_epochs} epochs on {args.pretrain_images} images", flush=True)
    started = time.time()
    out = subprocess.run([*COMMAND, "submit", str(job_path), "--json", "--set",
                          f"runs_dir={args.cache / 'pretrain-runs'}"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"pretraining failed: {out.stderr.strip().splitlines()[-1:]}")
    run_dir = Path(json.loads(out.stdout)["run_dir"])
    summary = json.loads((run_dir / "summary.json").read_text())
    done = {"job": job, "mAP50-95": summary["metrics"]["metrics/mAP50-95(B)"], "wall_s": round(time.time() - started),
            "device": args.device}
    shutil.copyfile(run_dir / "weights" / "best.pt", weights.with_suffix(".tmp"))
    weights.with_suffix(".tmp").replace(weights)
    info.write_text(json.dumps(done, indent=1) + "\n")
    return weights, done


def finetune_job(args, weights: Path, data_yaml: Path, optimizer: str) -> dict:
    return {
        "name": f"finetune-{optimizer.lower()}",
        "model": str(weights),
        "data": str(data_yaml),
        "epochs": args.epochs, "imgsz": args.imgsz, "deterministic": True,
        "hyp": {"preset": "scratch-default", "weight_decay": 0.0005, "warmup_epochs": 3.0, **OPTIMIZERS[optimizer]},
        "reference": {"devices": 1, "batch": args.ref_batch, "nbs": args.ref_batch},
        "target": {"devices": args.device, "batch": args.ref_batch},
        "wandb": {"mode": "disabled"},
        "overrides": {"workers": args.workers, "plots": False},
    }


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="target devices of every run: cpu, or one GPU such as 0")
    ap.add_argument("--optimizers", nargs="+", default=["auto", "SGD"], choices=list(OPTIMIZERS))
    ap.add_argument("--policies", nargs="+", default=["none", "auto"], choices=list(bench_scaling.POLICIES))
    ap.add_argument("--ks", nargs="+", type=int, default=[4, 8], help="images-per-step multiples besides 1")
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--images", type=int, default=1024, help="fine-tuning images")
    ap.add_argument("--val-images", type=int, default=256)
    ap.add_argument("--imgsz", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=10, help="the fine-tuning's epochs (a short schedule)")
    ap.add_argument("--ref-batch", type=int, default=8, help="the reference's batch (= its nbs)")
    ap.add_argument("--pretrain-images", type=int, default=2048)
    ap.add_argument("--pretrain-epochs", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2, help="Ultralytics loader workers per run")
    ap.add_argument("--parallel", type=int, default=2, help="trainings at a time")
    ap.add_argument("--cache", type=Path, default=REPO / "runs" / "finetune-cache",
                    help="where the pretrained stand-in is kept (carry it to a GPU machine)")
    ap.add_argument("--skip-reference", action="store_true", help="no k = 1 runs (another invocation has them)")
    ap.add_argument("--pretrain-only", action="store_true", help="only make (or find) the cached stand-in")
    ap.add_argument("--work", type=Path, default=REPO / "runs" / "bench_finetune")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "bench_finetune.json")
    args = ap.parse_args(argv)
    args.task = "detect"  # what bench_scaling's readers need
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = "python bench/bench_finetune.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.time()
    weights, pretrained = pretrained_weights(args)
    print(f"stand-in {weights.name}: mAP50-95 {pretrained['mAP50-95']:.4f} on its own domain", flush=True)
    if args.pretrain_only:
        return 0
    data_yaml = generate_dataset(args.work / "finetune-data", images=args.images, val_images=args.val_images,
                                 imgsz=args.imgsz, **FINETUNE_DATA)
    for opt in args.optimizers:
        (args.work / f"{opt}.yaml").write_text(yaml.safe_dump(finetune_job(args, weights, data_yaml, opt),
                                                              sort_keys=False))
    grid = [] if args.skip_reference else [(opt, 1, "none", s) for opt in args.optimizers for s in args.seeds]
    # seed-major: a campaign cut short leaves whole seeds, each paired across policies
    grid += [(o, k, p, s) for o, k, s, p in itertools.product(args.optimizers, args.ks, args.seeds, args.policies)]
    rows = bench_scaling.run_grid(args, grid, lambda rows: save(args, command, rows, started, pretrained))
    bench_scaling.print_table(bench_scaling.summarize(rows))
    print(f"\nwrote {args.out}")
    return 0


def save(args, command: str, rows: list[dict], started: float, pretrained: dict) -> None:
    order = bench_scaling.policies_in(rows)
    rows = sorted(rows, key=lambda r: (r["optimizer"], r["k"], order.index(r["policy"]), r["seed"]))
    result = {
        "command": command,
        "task": {"images": args.images, "val_images": args.val_images, "imgsz": args.imgsz, "epochs": args.epochs,
                 "data": FINETUNE_DATA, "model": "yolo11n fine-tuned from the cached stand-in", "task": "detect",
                 "metric": bench_scaling.metric_key("detect"),
                 "reference": {"batch": args.ref_batch, "nbs": args.ref_batch}, "pretrained": pretrained},
        "device": args.device, "wall_s": round(time.time() - started), "runs": rows,
        "summary": bench_scaling.summarize(rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
