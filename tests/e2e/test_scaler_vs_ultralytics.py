"""The library proof: real Ultralytics DetectionTrainers, built on CPU with the arguments the scaler
emits, must apply exactly the scaler's `effective` values (accumulate, optimizer param-group
weight_decay and lr, warmup iterations, the optimizer optimizer=auto picks).

Runs `_setup_train()` only (model, dataloaders, optimizer); no training step. One device
(world size 1). A tiny generated dataset (8 random 64x64 images) keeps it to seconds per trainer.
"""

from __future__ import annotations

import os

os.environ.setdefault("YOLO_OFFLINE", "1")  # before ultralytics is imported: no version check, no analytics

import random
import struct
import zlib
from pathlib import Path

import pytest

from orchestrator.scaling.scaler import scale
from orchestrator.scaling.types import ReferenceHyp, TargetHardware
from orchestrator.devices import parse_devices

pytestmark = pytest.mark.slow

N_IMAGES = 8
NC = 2


def _png(path: Path, size: int, rng: random.Random) -> None:
    """A random RGB PNG, written without PIL/numpy (pure zlib)."""
    raw = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(size * 3)) for _ in range(size))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def data_yaml(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tinyset")
    rng = random.Random(0)
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(N_IMAGES):
            _png(root / "images" / split / f"{i}.png", 64, rng)
            cls = i % NC
            (root / "labels" / split / f"{i}.txt").write_text(f"{cls} 0.5 0.5 {rng.uniform(0.2, 0.6):.3f} {rng.uniform(0.2, 0.6):.3f}\n")
    y = root / "data.yaml"
    y.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames:\n  0: a\n  1: b\n")
    return y


@pytest.fixture(scope="module")
def trainer_factory(data_yaml, tmp_path_factory):
    pytest.importorskip("ultralytics")
    from ultralytics.models.yolo.detect import DetectionTrainer

    runs = tmp_path_factory.mktemp("runs")
    count = [0]

    def build(args: dict, epochs: int):
        count[0] += 1
        overrides = dict(
            model="yolo11n.yaml",
            data=str(data_yaml),
            imgsz=64,
            epochs=epochs,
            device="cpu",
            workers=0,
            amp=False,
            plots=False,
            val=False,
            verbose=False,
            seed=0,
            project=str(runs),
            name=f"t{count[0]}",
            exist_ok=True,
            **args,
        )
        trainer = DetectionTrainer(overrides=overrides)
        trainer._setup_train()  # BaseTrainer._setup_train: model, loaders, accumulate, optimizer, scheduler
        return trainer

    return build


def _check(trainer, eff: dict) -> None:
    """Compare a set-up trainer with the scaler's effective values."""
    nb = len(trainer.train_loader)
    assert nb == eff["batches_per_epoch"]
    # images per optimizer step as the loader really delivers them: its batch is capped at the dataset
    first = next(iter(trainer.train_loader))
    assert first["img"].shape[0] * trainer.accumulate == eff["images_per_step"]
    assert trainer.accumulate == eff["accumulate"]
    assert trainer._get_warmup_iterations(nb) == eff["warmup_iterations"]  # what _do_train computes as nw
    assert type(trainer.optimizer).__name__ == eff["optimizer"]
    assert trainer.args.optimizer == eff["optimizer"]
    assert trainer.args.warmup_bias_lr == pytest.approx(eff["warmup_bias_lr"])
    lr0, wd = eff["lr0"], eff["weight_decay"]
    seen = set()
    for g in trainer.optimizer.param_groups:
        kind = g["param_group"]
        seen.add(kind)
        expected_wd = wd if kind in {"weight", "muon"} else 0.0
        assert g["weight_decay"] == pytest.approx(expected_wd, rel=1e-12, abs=0), kind
        # MuSGD gives some head groups lr * 3 (build_optimizer); every other group starts at lr0
        assert g["initial_lr"] == pytest.approx(lr0, rel=1e-12) or (
            eff["optimizer"] == "MuSGD" and g["initial_lr"] == pytest.approx(3 * lr0, rel=1e-12)
        ), kind
        if "betas" in g:
            assert g["betas"][0] == pytest.approx(eff["momentum"])
        elif "momentum" in g:
            assert g["momentum"] == pytest.approx(eff["momentum"])
    assert "weight" in seen


def _cpu(**kw) -> TargetHardware:
    return TargetHardware(parse_devices("cpu"), **kw)


CASES = [
    # (id, reference, target, policy)
    ("sgd-b16", ReferenceHyp(optimizer="SGD", dataset_size=N_IMAGES, nc=NC), _cpu(batch=16), "auto"),
    # batch 64 on one device: accumulate 1 from nbs 64
    ("sgd-b64", ReferenceHyp(optimizer="SGD", dataset_size=N_IMAGES, nc=NC), _cpu(batch=64), "auto"),
    # batch 128, stock nbs 64: round(0.5) == 0 -> accumulate 1, Ultralytics doubles weight decay
    ("sgd-b128-none", ReferenceHyp(optimizer="SGD", dataset_size=N_IMAGES, nc=NC), _cpu(batch=128), "none"),
    # batch 128 under auto: k = 2, linear (lr0 kept), passed weight decay compensates Ultralytics' factor 128/64
    ("sgd-b128-auto", ReferenceHyp(optimizer="SGD", dataset_size=N_IMAGES, nc=NC), _cpu(batch=128), "auto"),
    # nbs raised: 128 images per step planned, per-device cap 32 -> accumulate 4 via nbs 128
    (
        "sgd-nbs-raised",
        ReferenceHyp(optimizer="SGD", dataset_size=N_IMAGES, nc=NC),
        _cpu(batch=128, max_batch_per_device=32),
        "auto",
    ),
    ("adamw-b128-auto", ReferenceHyp(optimizer="AdamW", lr0=0.001, weight_decay=0.05, dataset_size=N_IMAGES, nc=NC), _cpu(batch=128), "auto"),
    ("adamw-table", ReferenceHyp(optimizer="AdamW", lr0=0.001, dataset_size=N_IMAGES, nc=NC), _cpu(batch=32), "table"),
    # k = 8 from scratch: auto's linear (evidence.decision, on every device)
    ("sgd-k8-cpu", ReferenceHyp(optimizer="SGD", batch=8, nbs=8, dataset_size=N_IMAGES, nc=NC), _cpu(batch=64), "auto"),
    # k = 8 fine-tuning: auto's lr0 x sqrt(k), an irrational multiplier on lr0 and the weight decay
    ("sgd-k8-finetune", ReferenceHyp(optimizer="SGD", batch=8, nbs=8, dataset_size=N_IMAGES, nc=NC, pretrained=True),
     _cpu(batch=64), "auto"),
    # odd total: round(64/48) = 1 -> 48 images per step, k = 0.75
    ("sgd-b48", ReferenceHyp(optimizer="SGD", dataset_size=N_IMAGES, nc=NC), _cpu(batch=48), "auto"),
    # a dataset larger than the batch: batches of 4 (the cases above are capped at the 8 images)
    ("sgd-b4", ReferenceHyp(optimizer="SGD", batch=4, dataset_size=N_IMAGES, nc=NC, epochs=20), _cpu(batch=4), "auto"),
    ("rmsprop-b4", ReferenceHyp(optimizer="RMSprop", lr0=0.001, batch=4, dataset_size=N_IMAGES, nc=NC, epochs=20),
     _cpu(batch=4), "none"),
    ("musgd-b4", ReferenceHyp(optimizer="MuSGD", batch=4, dataset_size=N_IMAGES, nc=NC, epochs=20), _cpu(batch=4),
     "none"),
]


@pytest.mark.parametrize("ref,target,policy", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_trainer_applies_scaler_effective(trainer_factory, ref, target, policy):
    result = scale(ref, target, policy)
    assert result.passed["optimizer"] != "auto"
    trainer = trainer_factory(result.passed, ref.epochs)
    _check(trainer, result.effective)


@pytest.mark.parametrize("epochs,expected", [(100, "AdamW"), (10001, "MuSGD")])
def test_optimizer_auto_resolution_matches_ultralytics(trainer_factory, epochs, expected):
    """optimizer=auto with lr0 given: Ultralytics ignores lr0 and picks by iterations; the scaler's
    resolution (reference_effective) and its pinned arguments must give the same optimizer and lr."""
    ref = ReferenceHyp(optimizer="auto", lr0=0.02, epochs=epochs, dataset_size=N_IMAGES, nc=NC)
    result = scale(ref, _cpu(), "none")
    assert result.reference_effective["optimizer"] == expected

    stock = trainer_factory(
        {"batch": ref.batch, "nbs": ref.nbs, "optimizer": "auto", "lr0": ref.lr0, "momentum": ref.momentum}, epochs
    )
    assert stock.args.optimizer == expected
    assert stock.args.lr0 == pytest.approx(result.reference_effective["lr0"])
    assert stock.args.warmup_bias_lr == 0.0
    lr = result.passed["lr0"]
    for g in stock.optimizer.param_groups:  # MuSGD boosts some head groups to 3 * lr
        assert g["initial_lr"] == pytest.approx(lr) or g["initial_lr"] == pytest.approx(3 * lr)

    pinned = trainer_factory(result.passed, epochs)
    _check(pinned, result.effective)
    for gs, gp in zip(stock.optimizer.param_groups, pinned.optimizer.param_groups):
        assert gs["initial_lr"] == pytest.approx(gp["initial_lr"])
        assert gs["weight_decay"] == pytest.approx(gp["weight_decay"])


@pytest.mark.parametrize("fraction,images", [(0.5, 4), (3, 3), ([0.25, 1.0], 2), (1.0, N_IMAGES)])
def test_plan_counts_the_images_fraction_keeps(trainer_factory, data_yaml, fraction, images):
    """`overrides.fraction` trains on part of the dataset: steps per epoch (hence warmup and
    optimizer=auto's choice) follow the part, as the real trainer's loader does."""
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job_dict

    job = load_job_dict({
        "name": "fraction", "model": "yolo11n.yaml", "data": str(data_yaml), "epochs": 1, "imgsz": 64,
        "hyp": {"optimizer": "SGD"}, "reference": {"devices": 1, "batch": 2}, "target": {"devices": "cpu", "batch": 2},
        "overrides": {"fraction": fraction},
    }, base_dir=data_yaml.parent, label="job")
    plan = make_plan(job)
    eff = plan.scaled.effective
    assert plan.data.train_images == N_IMAGES and eff["dataset_size"] == images
    trainer = trainer_factory({**plan.scaled.passed, "fraction": fraction}, 1)
    assert len(trainer.train_loader.dataset) == images
    _check(trainer, eff)


@pytest.mark.parametrize("batch,expected_batches", [(3, 2), (4, 2), (8, 1)])
def test_compile_drops_the_short_last_batch_as_planned(trainer_factory, data_yaml, batch, expected_batches):
    """`overrides.compile: true` makes DetectionTrainer.get_dataloader drop the short last batch: the
    plan counts the same batches (8 images: batch 3 gives 2, not 3). The loader is rebuilt with
    compile set, without compiling the model."""
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job_dict

    job = load_job_dict({
        "name": "compiled", "model": "yolo11n.yaml", "data": str(data_yaml), "epochs": 10, "imgsz": 64,
        "hyp": {"optimizer": "SGD"}, "reference": {"devices": 1, "batch": batch},
        "target": {"devices": "cpu", "batch": batch}, "overrides": {"compile": True},
    }, base_dir=data_yaml.parent, label="job")
    eff = make_plan(job).scaled.effective
    assert eff["batches_per_epoch"] == expected_batches
    trainer = trainer_factory({"batch": batch, "nbs": 64, "optimizer": "SGD"}, 10)
    trainer.args.compile = True
    loader = trainer.get_dataloader(trainer.data["train"], batch_size=batch, rank=-1, mode="train")
    assert len(loader) == eff["batches_per_epoch"]
