"""Fixed-shape batches for the XLA backend over Ultralytics' own dataset (CPU only, no torch_xla)."""

from __future__ import annotations

import logging
import os

import pytest
import torch

os.environ.setdefault("YOLO_OFFLINE", "1")

from orchestrator.worker.xla.data import HostBatches, build_train_loader  # noqa: E402


@pytest.fixture(scope="module")
def train_set(tmp_path_factory):
    from orchestrator.data.synth import generate_dataset
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    data_yaml = generate_dataset(tmp_path_factory.mktemp("xla_data") / "ds", images=10, val_images=2, imgsz=64)
    cfg = get_cfg(overrides={"imgsz": 32, "mosaic": 1.0, "workers": 0})
    data = check_det_dataset(str(data_yaml))
    return build_yolo_dataset(cfg, data["train"], 3, data, mode="train", stride=32)


def test_loader_gives_fixed_shapes_and_drops_the_last_partial_batch(train_set):
    loader = build_train_loader(train_set, batch_size=3, workers=0, max_boxes=8)
    assert len(loader) == 10 // 3  # drop_last
    host = HostBatches(loader, 8)
    batches = list(host)
    assert len(batches) == 3
    for b in batches:
        assert set(b) == {"img", "gt_cls", "gt_bboxes", "gt_mask"}  # host-only keys stripped
        assert b["img"].shape == (3, 3, 32, 32) and b["img"].dtype == torch.uint8
        assert b["gt_cls"].shape == (3, 8, 1) and b["gt_bboxes"].shape == (3, 8, 4)
        assert b["gt_mask"].shape == (3, 8, 1)
        # padded rows are all zeros; real rows have positive normalized sizes
        m = b["gt_mask"][..., 0].bool()
        assert (b["gt_bboxes"][~m] == 0).all() and (b["gt_bboxes"][m][:, 2:] > 0).all()
    assert len(host.batch_boxes) == 3 and host.max_seen >= 1


def test_boxes_over_max_boxes_are_truncated_with_one_warning(train_set, caplog):
    loader = build_train_loader(train_set, batch_size=3, workers=0, max_boxes=1)
    host = HostBatches(loader, 1)
    with caplog.at_level(logging.WARNING, logger="orchestrator.worker.xla"):
        for _ in range(2):  # two epochs
            for b in host:
                assert b["gt_mask"].sum(1).max() <= 1
    warnings = [r for r in caplog.records if "max_boxes=1" in r.getMessage()]
    assert len(warnings) == 1  # once, with the image and its count
    assert "boxes > max_boxes=1" in warnings[0].getMessage()
    assert host.truncated_images >= 1 and host.max_seen > 1


def test_loader_needs_a_full_batch(train_set):
    with pytest.raises(ValueError, match="at least"):
        build_train_loader(train_set, batch_size=16, workers=0, max_boxes=4)


@pytest.mark.parametrize("world,batch", [(1, 3), (2, 2), (3, 1), (4, 2)])
def test_plan_counts_the_xla_loaders_batches(train_set, world, batch):
    """The plan's batches per epoch (and so warmup and accumulation) for an XLA target are the XLA
    loader's: global batches of batch x devices (SPMD shards them), only full ones."""
    from orchestrator.scaling.effective import effective_values

    passed = {"batch": batch * world, "nbs": 64, "optimizer": "SGD", "lr0": 0.01, "momentum": 0.9,
              "weight_decay": 0.0005, "warmup_epochs": 3.0, "warmup_bias_lr": 0.1}
    eff = effective_values(passed, world, epochs=10, dataset_size=len(train_set), kind="tpu")
    loader = build_train_loader(train_set, batch_size=batch * world, workers=0, max_boxes=4)
    assert len(loader) == eff["batches_per_epoch"]
    assert eff["samples_per_device"] == len(train_set) // world
    assert eff["images_per_step"] == batch * world * eff["accumulate"]
    assert eff["warmup_iterations"] == round(3.0 * eff["batches_per_epoch"])
