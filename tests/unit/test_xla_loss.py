"""The fixed-shape XLA loss equals Ultralytics' v8DetectionLoss (plain torch on CPU, no XLA)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

from orchestrator.worker.xla.data import PaddedCollate, pad_targets
from orchestrator.worker.xla.loss import XLADetectionLoss, XLAE2ELoss, build_xla_criterion

from ultralytics.cfg import get_cfg
from ultralytics.nn.tasks import DetectionModel
from ultralytics.utils.loss import E2ELoss, v8DetectionLoss

TINY = Path(__file__).resolve().parents[2] / "tests" / "assets" / "tiny-det.yaml"
RTOL = 1e-4


def _model(nc=3, **yaml_over) -> DetectionModel:
    cfg = yaml.safe_load(TINY.read_text())
    cfg.update(yaml_over)
    torch.manual_seed(0)
    m = DetectionModel(cfg, nc=nc, verbose=False)
    m.args = get_cfg(overrides={"box": 7.5, "cls": 0.5, "dfl": 1.5})
    return m.train()


def _batch(counts: list[int], nc=3, seed=0, tiny_boxes=False):
    """Flat Ultralytics targets: some overlapping boxes, some tiny, varying count per image."""
    g = torch.Generator().manual_seed(seed)
    idx, cls, boxes = [], [], []
    for i, n in enumerate(counts):
        for j in range(n):
            wh = torch.rand(2, generator=g) * 0.5 + 0.05
            if tiny_boxes and j % 2:
                wh = torch.tensor([0.02, 0.03])  # below the stride floor of the assigner
            xy = torch.rand(2, generator=g) * (1 - wh) + wh / 2
            if j and j % 3 == 0:  # a near duplicate of the previous box: assigner conflicts
                xy, wh = boxes[-1][:2] + 0.01, boxes[-1][2:]
            idx.append(i)
            cls.append(float(torch.randint(nc, (1,), generator=g)))
            boxes.append(torch.cat([xy, wh]))
    b = len(counts)
    batch = {
        "batch_idx": torch.tensor(idx, dtype=torch.float32),
        "cls": torch.tensor(cls, dtype=torch.float32).view(-1, 1),
        "bboxes": torch.stack(boxes) if boxes else torch.zeros(0, 4),
    }
    torch.manual_seed(seed)
    img = torch.rand(b, 3, 64, 64)
    return img, batch


def _padded(batch, b, max_boxes):
    gt_cls, gt_bboxes, gt_mask, counts = pad_targets(batch["batch_idx"], batch["cls"], batch["bboxes"], b, max_boxes)
    return {"gt_cls": gt_cls, "gt_bboxes": gt_bboxes, "gt_mask": gt_mask}, counts


def _compare(model, ref_crit, xla_crit, counts, max_boxes=16, seed=0, tiny_boxes=False):
    img, batch = _batch(counts, seed=seed, tiny_boxes=tiny_boxes)
    padded, _ = _padded(batch, len(counts), max_boxes)

    preds = model(img)
    ref_loss, ref_items = ref_crit(preds, batch)
    ref_grads = torch.autograd.grad(ref_loss.sum(), [p for p in model.model[-1].parameters() if p.requires_grad])

    preds = model(img)
    loss, items = xla_crit(preds, padded)
    grads = torch.autograd.grad(loss.sum(), [p for p in model.model[-1].parameters() if p.requires_grad])

    torch.testing.assert_close(loss, ref_loss, rtol=RTOL, atol=1e-6)
    torch.testing.assert_close(loss.sum(), ref_loss.sum(), rtol=RTOL, atol=1e-6)
    assert list(items) == list(ref_items)
    for k in items:
        torch.testing.assert_close(items[k], ref_items[k], rtol=RTOL, atol=1e-6)
    for g, rg in zip(grads, ref_grads):
        torch.testing.assert_close(g, rg, rtol=1e-3, atol=1e-6)
    return loss


@pytest.mark.parametrize(
    "counts",
    [
        [3, 1, 0, 5],  # different counts incl. an image with zero boxes
        [1, 1, 1, 1],
        [0, 0, 0, 0],  # no boxes at all
        [7, 0, 2, 12],
    ],
)
def test_loss_matches_v8_detection_loss(counts):
    model = _model()
    ref, xla = v8DetectionLoss(model), XLADetectionLoss(model)
    loss = _compare(model, ref, xla, counts)
    if sum(counts):
        assert float(loss[0].detach()) > 0 and float(loss[2].detach()) > 0  # real foreground was assigned
    else:
        assert float(loss[0].detach()) == 0 and float(loss[2].detach()) == 0


def test_loss_matches_with_tiny_boxes_gains_and_seeds():
    model = _model()
    model.args = get_cfg(overrides={"box": 5.0, "cls": 1.3, "dfl": 0.7})
    ref, xla = v8DetectionLoss(model), XLADetectionLoss(model)
    for seed in range(3):
        _compare(model, ref, xla, [4, 2, 9], seed=seed, tiny_boxes=True)


def test_padding_size_does_not_change_the_loss():
    model = _model()
    xla = XLADetectionLoss(model)
    img, batch = _batch([2, 0, 3])
    preds = model(img)
    losses = [xla(preds, _padded(batch, 3, m)[0])[0] for m in (3, 8, 64)]
    for x in losses[1:]:
        torch.testing.assert_close(x, losses[0], rtol=1e-6, atol=1e-7)


def test_class_weights_are_applied_like_ultralytics():
    model = _model()
    model.class_weights = torch.tensor([0.5, 1.0, 2.0])
    _compare(model, v8DetectionLoss(model), XLADetectionLoss(model), [3, 1, 0, 2])


def test_e2e_loss_matches_for_end2end_head():
    """YOLO26-style head (end2end, reg_max 1): one2many + one2one losses, L1 branch."""
    model = _model(end2end=True, reg_max=1)
    crit = build_xla_criterion(model)
    assert isinstance(crit, XLAE2ELoss)
    ref = E2ELoss(model)
    for c in (crit, ref):
        c.update()  # gains move off their initial values, as after an epoch
    img, batch = _batch([2, 0, 4, 1])
    padded, _ = _padded(batch, 4, 8)
    preds = model(img)
    rl, ri = ref(preds, batch)
    xl, xi = crit(copy.copy(preds), padded)
    torch.testing.assert_close(xl, rl, rtol=RTOL, atol=1e-6)
    for k in ri:
        torch.testing.assert_close(xi[k], ri[k], rtol=RTOL, atol=1e-6)


def test_pad_targets_layout_and_truncation():
    idx = torch.tensor([0, 2, 0, 2, 2, 2])
    cls = torch.arange(6).float().view(-1, 1)
    boxes = torch.arange(24).float().view(6, 4) / 24
    gt_cls, gt_boxes, gt_mask, counts = pad_targets(idx, cls, boxes, 3, max_boxes=3)
    assert gt_cls.shape == (3, 3, 1) and gt_boxes.shape == (3, 3, 4) and gt_mask.shape == (3, 3, 1)
    assert counts.tolist() == [2, 0, 4]
    assert gt_cls[0, :, 0].tolist() == [0, 2, 0] and gt_mask[0, :, 0].tolist() == [1, 1, 0]
    assert gt_mask[1].sum() == 0 and gt_boxes[1].abs().sum() == 0
    assert gt_cls[2, :, 0].tolist() == [1, 3, 4]  # first max_boxes kept, in order
    torch.testing.assert_close(gt_boxes[2], boxes[[1, 3, 4]])
    # empty batch
    e = pad_targets(torch.zeros(0), torch.zeros(0, 1), torch.zeros(0, 4), 2, 4)
    assert e[2].sum() == 0 and e[3].tolist() == [0, 0]


def test_padded_collate_wraps_ultralytics_collate():
    from ultralytics.data.dataset import YOLODataset

    samples = [
        {"img": torch.zeros(3, 8, 8, dtype=torch.uint8), "cls": torch.tensor([[1.0]]),
         "bboxes": torch.tensor([[0.5, 0.5, 0.2, 0.2]]), "batch_idx": torch.zeros(1), "im_file": "a"},
        {"img": torch.zeros(3, 8, 8, dtype=torch.uint8), "cls": torch.zeros(0, 1),
         "bboxes": torch.zeros(0, 4), "batch_idx": torch.zeros(0), "im_file": "b"},
    ]
    out = PaddedCollate(YOLODataset.collate_fn, 4)(samples)
    assert out["img"].shape == (2, 3, 8, 8) and out["img"].dtype == torch.uint8
    assert out["gt_mask"][:, :, 0].tolist() == [[1, 0, 0, 0], [0, 0, 0, 0]]
    assert out["n_boxes"].tolist() == [1, 0] and out["im_file"] == ["a", "b"]


def test_criterion_rejects_non_detection_models():
    from ultralytics.nn.tasks import SegmentationModel

    with pytest.raises(TypeError):
        build_xla_criterion(SegmentationModel("yolo11n-seg.yaml", nc=3, verbose=False))
