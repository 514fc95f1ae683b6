"""Fixed-shape (XLA-friendly) version of Ultralytics' detection loss.

Ultralytics' ``v8DetectionLoss`` sizes its target tensor from the data (``unique`` /
``counts.max()``), the ``TaskAlignedAssigner`` gathers candidate pairs with ``nonzero`` and
``BboxLoss`` indexes with ``fg_mask.nonzero()``. Every one of these gives a tensor whose shape
depends on the batch, so under XLA each new box count (and even each new foreground count) is a
new graph to compile.

Here the targets arrive already padded to a fixed ``(B, max_boxes)`` layout (see
``orchestrator.worker.xla.data``), and every data-dependent selection is replaced by a dense,
masked computation over all (image, gt, anchor) entries:

- ``MaskedTaskAlignedAssigner.get_box_metrics``: class scores gathered for every gt row and the
  CIoU computed for every (gt, anchor) pair by broadcasting, then zeroed outside the candidate
  mask, instead of ``mask.nonzero()`` + fancy indexing.
- ``MaskedBboxLoss``: CIoU and DFL computed for every anchor and weighted by the foreground mask
  (weights are zero off the foreground), instead of ``fg_mask.nonzero()``.
- ``XLADetectionLoss``: no ``preprocess`` (the padding happens on the host), no ``.item()``.

Everything else (anchors, decoding, the assigner's top-k / conflict resolution / target scores,
the gains ``box``/``cls``/``dfl``, class weights, the ``* batch_size``) is Ultralytics' own code,
inherited unchanged, so on the same batch the loss equals ``v8DetectionLoss`` (see
``tests/unit/test_xla_loss.py``). Padded gt rows are all zeros, exactly like the rows Ultralytics
itself pads with; padding to ``max_boxes`` instead of the batch maximum changes nothing.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ultralytics.utils.loss import E2ELoss, v8DetectionLoss
from ultralytics.utils.metrics import bbox_iou
from ultralytics.utils.ops import xywh2xyxy
from ultralytics.utils.tal import TaskAlignedAssigner, bbox2dist, make_anchors

__all__ = [
    "MaskedTaskAlignedAssigner",
    "MaskedBboxLoss",
    "XLADetectionLoss",
    "XLAE2ELoss",
    "build_xla_criterion",
]

# Keys of a padded batch (produced by orchestrator.worker.xla.data.pad_targets / PaddedCollate).
GT_CLS, GT_BOXES, GT_MASK = "gt_cls", "gt_bboxes", "gt_mask"


class MaskedTaskAlignedAssigner(TaskAlignedAssigner):
    """TaskAlignedAssigner on padded gt with fixed shapes: no nonzero, no host sync, no OOM retry.

    ``gt_labels`` (b, M, 1), ``gt_bboxes`` (b, M, 4) xyxy pixels, ``mask_gt`` (b, M, 1) with
    zeros for the padded rows. M is fixed (``max_boxes``), so it is never 0.
    """

    @torch.no_grad()
    def forward(self, pd_scores, pd_bboxes, anc_points, gt_labels, gt_bboxes, mask_gt):
        self.bs = pd_scores.shape[0]
        self.n_max_boxes = gt_bboxes.shape[1]
        # Ultralytics returns early when the batch has no boxes at all; here M > 0 always and
        # the masks make the same outcome (no foreground, zero target scores) fall out.
        return self._forward(pd_scores, pd_bboxes, anc_points, gt_labels, gt_bboxes, mask_gt)

    def get_box_metrics(self, pd_scores, pd_bboxes, gt_labels, gt_bboxes, mask_gt):
        """Dense version of the parent: every (b, gt, anchor) entry, zero outside ``mask_gt``.

        pd_scores (b, na, nc), pd_bboxes (b, na, 4), gt_labels (b, M, 1), gt_bboxes (b, M, 4),
        mask_gt (b, M, na). Returns align_metric, overlaps, both (b, M, na).
        """
        na = pd_bboxes.shape[-2]
        mask = mask_gt.bool()
        cls_idx = gt_labels.long().squeeze(-1).clamp(0, self.num_classes - 1)  # (b, M)
        # bbox_scores[b, m, a] = pd_scores[b, a, cls[b, m]]
        bbox_scores = torch.gather(
            pd_scores.transpose(1, 2), 1, cls_idx.unsqueeze(-1).expand(-1, -1, na)
        )  # (b, M, na)
        overlaps = self.iou_calculation(gt_bboxes.unsqueeze(2), pd_bboxes.unsqueeze(1))  # (b, M, na)
        zero = torch.zeros((), dtype=overlaps.dtype, device=overlaps.device)
        overlaps = torch.where(mask, overlaps, zero).to(pd_bboxes.dtype)
        align_metric = bbox_scores.pow(self.alpha) * overlaps.pow(self.beta)
        align_metric = torch.where(mask, align_metric, torch.zeros_like(align_metric))
        return align_metric, overlaps


class MaskedBboxLoss(nn.Module):
    """BboxLoss (CIoU + DFL, or L1 when reg_max == 1) as dense sums weighted by the fg mask."""

    def __init__(self, reg_max: int = 16):
        super().__init__()
        self.reg_max = reg_max

    def forward(
        self,
        pred_dist: torch.Tensor,  # (b, a, 4*reg_max)
        pred_bboxes: torch.Tensor,  # (b, a, 4) xyxy, grid units
        anchor_points: torch.Tensor,  # (a, 2)
        target_bboxes: torch.Tensor,  # (b, a, 4) xyxy, grid units
        target_scores: torch.Tensor,  # (b, a, nc)
        target_scores_sum: torch.Tensor,  # scalar
        fg_mask: torch.Tensor,  # (b, a) bool
        imgsz: torch.Tensor,
        stride: torch.Tensor,  # (a, 1)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        fg = fg_mask.unsqueeze(-1)  # (b, a, 1)
        weight = target_scores.sum(-1, keepdim=True) * fg  # (b, a, 1); zero off the foreground
        # Off the foreground the target is whatever gt 0 is (possibly an all-zero padded box).
        # Swap in a harmless box there so no inf/nan can leak into the (zero-weighted) grads.
        safe_target = torch.where(fg, target_bboxes, pred_bboxes.detach())
        iou = bbox_iou(pred_bboxes, safe_target, xywh=False, CIoU=True)  # (b, a, 1)
        loss_iou = ((1.0 - iou) * weight).sum() / target_scores_sum

        if self.reg_max > 1:
            target_ltrb = bbox2dist(anchor_points, safe_target, self.reg_max - 1)  # (b, a, 4)
            loss_dfl = (self._dfl(pred_dist, target_ltrb) * weight).sum() / target_scores_sum
        else:
            target_ltrb = bbox2dist(anchor_points, safe_target) * stride
            target_ltrb = target_ltrb / imgsz[[1, 0, 1, 0]]
            pred = pred_dist * stride / imgsz[[1, 0, 1, 0]]
            l1 = F.l1_loss(pred, target_ltrb, reduction="none").mean(-1, keepdim=True)
            loss_dfl = (l1 * weight).sum() / target_scores_sum
        return loss_iou, loss_dfl

    def _dfl(self, pred_dist: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Ultralytics DFLoss for every anchor: (b, a, 4*reg_max), (b, a, 4) -> (b, a, 1)."""
        b, a, _ = pred_dist.shape
        target = target.clamp(0, self.reg_max - 1 - 0.01)
        tl = target.long()
        tr = tl + 1
        wl = tr - target
        wr = 1 - wl
        logp = F.log_softmax(pred_dist.view(b, a, 4, self.reg_max), dim=-1)
        lp_l = logp.gather(-1, tl.unsqueeze(-1)).squeeze(-1)
        lp_r = logp.gather(-1, tr.unsqueeze(-1)).squeeze(-1)
        return -(lp_l * wl + lp_r * wr).mean(-1, keepdim=True)


class XLADetectionLoss(v8DetectionLoss):
    """v8DetectionLoss on a padded batch: ``batch`` has gt_cls (B,M,1), gt_bboxes (B,M,4)
    normalized xywh, gt_mask (B,M,1) 1.0 for real boxes. Same return as Ultralytics:
    ``(loss_vector * batch_size, {name: detached item})``."""

    def __init__(self, model: nn.Module, tal_topk: int = 10, tal_topk2: int | None = None):
        super().__init__(model, tal_topk=tal_topk, tal_topk2=tal_topk2)
        a = self.assigner
        self.assigner = MaskedTaskAlignedAssigner(
            topk=a.topk, num_classes=a.num_classes, alpha=a.alpha, beta=a.beta, stride=a.stride, topk2=a.topk2
        )
        self.bbox_loss = MaskedBboxLoss(self.reg_max).to(self.device)
        # Host copies of the strides: indexing the (device) stride tensor inside the step would be
        # a device->host read (a sync and a small extra graph) on every step.
        self.stride_list = [float(s) for s in self.stride.cpu().tolist()]

    def padded_targets(self, batch: dict[str, torch.Tensor], scale_tensor: torch.Tensor):
        """Padded normalized xywh -> (labels (B,M,1), xyxy pixel boxes (B,M,4)), zeros on padding.

        Kept in float32 whatever the prediction dtype (Ultralytics' targets are float32 too).
        """
        f32 = torch.float32
        mask = batch[GT_MASK].to(self.device, f32)
        labels = batch[GT_CLS].to(self.device, f32) * mask
        boxes = xywh2xyxy(batch[GT_BOXES].to(self.device, f32) * scale_tensor.to(f32)) * mask
        return labels, boxes

    def get_assigned_targets_and_loss(self, preds: dict[str, torch.Tensor], batch: dict[str, Any], **kw) -> tuple:
        pred_distri = preds["boxes"].permute(0, 2, 1).contiguous()
        pred_scores = preds["scores"].permute(0, 2, 1).contiguous()
        anchor_points, stride_tensor = make_anchors(preds["feats"], self.stride_list, 0.5)

        dtype = pred_scores.dtype
        h, w = preds["feats"][0].shape[2:]
        s0 = self.stride_list[0]
        imgsz = torch.tensor([h * s0, w * s0], device=self.device, dtype=dtype)
        scale = torch.tensor([w * s0, h * s0, w * s0, h * s0], device=self.device, dtype=torch.float32)

        gt_labels, gt_bboxes = self.padded_targets(batch, scale)
        mask_gt = gt_bboxes.sum(2, keepdim=True).gt_(0.0)  # as Ultralytics: rows of zeros are padding

        pred_bboxes = self.bbox_decode(anchor_points, pred_distri)
        _, target_bboxes, target_scores, fg_mask, target_gt_idx = self.assigner(
            pred_scores.detach().sigmoid(),
            (pred_bboxes.detach() * stride_tensor).type(gt_bboxes.dtype),
            anchor_points * stride_tensor,
            gt_labels,
            gt_bboxes,
            mask_gt,
        )
        target_scores_sum = target_scores.sum().clamp(min=1)

        bce = self.bce(pred_scores, target_scores.to(dtype))
        if self.class_weights is not None:
            bce = bce * self.class_weights
        loss_cls = bce.sum() / target_scores_sum
        loss_box, loss_dfl = self.bbox_loss(
            pred_distri,
            pred_bboxes,
            anchor_points,
            target_bboxes / stride_tensor,
            target_scores,
            target_scores_sum,
            fg_mask,
            imgsz,
            stride_tensor,
        )
        loss = torch.stack((loss_box * self.hyp.box, loss_cls * self.hyp.cls, loss_dfl * self.hyp.dfl))
        return (
            (fg_mask, target_gt_idx, target_bboxes, anchor_points, stride_tensor),
            loss,
            dict(zip(self.loss_names, loss.detach())),
        )


class XLAE2ELoss(E2ELoss):
    """Ultralytics E2ELoss (YOLO26-style one2many + one2one heads) built on XLADetectionLoss.

    The o2m/o2o gains are Python floats that change once per epoch (``update()``); under XLA a
    non-0/1 Python scalar is passed as device data, so this does not recompile.
    """

    def __init__(self, model: nn.Module):
        super().__init__(model, loss_fn=XLADetectionLoss)


def build_xla_criterion(model: nn.Module):
    """The XLA counterpart of ``DetectionModel.init_criterion`` for plain detection models."""
    from ultralytics.nn.modules.head import Detect
    from ultralytics.nn.tasks import DetectionModel

    # Exact types: segment/pose/obb models subclass these but need their own losses.
    if type(model) is not DetectionModel:
        raise TypeError(f"XLA backend supports plain detection models only, got {type(model).__name__}")
    head = model.model[-1]
    if type(head) is not Detect:
        raise TypeError(f"XLA backend supports the Detect head only, got {type(head).__name__}")
    if getattr(head, "one2one_cv2", None) is not None:
        return XLAE2ELoss(model)
    return XLADetectionLoss(model)
