"""Fixed-shape training batches for the XLA backend.

The dataset is Ultralytics' own (``DetectionTrainer.build_dataset`` -> ``build_yolo_dataset``), so
augmentation (mosaic, mixup, HSV, flips, ``close_mosaic``...) is exactly the stock pipeline. Only the
batching changes:

- ``drop_last``: every batch has the same number of images (a short last batch would be a new graph).
- targets padded per image to ``max_boxes`` rows: ``gt_cls`` (B, M, 1), ``gt_bboxes`` (B, M, 4)
  normalized xywh, ``gt_mask`` (B, M, 1); padded rows are all zeros. An image with more than
  ``max_boxes`` boxes keeps its first ``max_boxes`` (a warning with the count is logged once).
- only tensors travel to the device (``img`` stays uint8 on the wire; the step divides by 255).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator

import torch

__all__ = ["pad_targets", "PaddedCollate", "HostBatches", "build_train_loader"]

LOG = logging.getLogger("orchestrator.worker.xla")


def pad_targets(
    batch_idx: torch.Tensor, cls: torch.Tensor, bboxes: torch.Tensor, batch_size: int, max_boxes: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ultralytics' flat targets -> fixed (B, M, .) tensors.

    Args:
        batch_idx: (N,) image index of each box, cls: (N,) or (N, 1), bboxes: (N, 4) normalized xywh.
    Returns:
        gt_cls (B, M, 1), gt_bboxes (B, M, 4), gt_mask (B, M, 1) float32, and counts (B,) int64:
        the number of boxes each image had BEFORE truncation to M.
    """
    batch_idx = batch_idx.view(-1).long()
    cls = cls.view(-1).float()
    bboxes = bboxes.view(-1, 4).float()
    counts = torch.bincount(batch_idx, minlength=batch_size)[:batch_size] if batch_idx.numel() else torch.zeros(
        batch_size, dtype=torch.long
    )
    gt_cls = torch.zeros(batch_size, max_boxes, 1)
    gt_bboxes = torch.zeros(batch_size, max_boxes, 4)
    gt_mask = torch.zeros(batch_size, max_boxes, 1)
    if batch_idx.numel():
        # position of each box inside its image, keeping the original order (stable sort)
        order = torch.sort(batch_idx, stable=True).indices
        sorted_idx = batch_idx[order]
        starts = torch.cumsum(counts, 0) - counts
        within = torch.arange(len(sorted_idx)) - starts[sorted_idx]
        keep = within < max_boxes
        o, b, j = order[keep], sorted_idx[keep], within[keep]
        gt_cls[b, j, 0] = cls[o]
        gt_bboxes[b, j] = bboxes[o]
        gt_mask[b, j, 0] = 1.0
    return gt_cls, gt_bboxes, gt_mask, counts


class PaddedCollate:
    """Wrap a dataset's ``collate_fn``: same batch, plus the padded target tensors.

    The result holds only tensors: ``img`` (uint8), ``gt_cls``, ``gt_bboxes``, ``gt_mask`` and
    ``n_boxes`` (pre-truncation count per image, host side only: ``HostBatches`` removes it).
    Picklable, so it runs inside DataLoader worker processes.
    """

    def __init__(self, collate_fn, max_boxes: int):
        self.collate_fn = collate_fn
        self.max_boxes = int(max_boxes)

    def __call__(self, samples: list[dict]) -> dict[str, Any]:
        b = self.collate_fn(samples)
        n = b["img"].shape[0]
        gt_cls, gt_bboxes, gt_mask, counts = pad_targets(b["batch_idx"], b["cls"], b["bboxes"], n, self.max_boxes)
        out = {"img": b["img"], "gt_cls": gt_cls, "gt_bboxes": gt_bboxes, "gt_mask": gt_mask, "n_boxes": counts}
        if "im_file" in b:
            out["im_file"] = list(b["im_file"])
        return out


class HostBatches:
    """Iterable over a host DataLoader that checks box counts and strips host-only keys.

    Runs in the training process before ``MpDeviceLoader`` moves the batch, so the truncation
    warning is logged once per process with the image and its count (no device sync involved).
    """

    def __init__(self, loader: Iterable, max_boxes: int):
        self.loader = loader
        self.max_boxes = int(max_boxes)
        self.warned = False
        self.truncated_images = 0
        self.max_seen = 0
        self.batch_boxes: list[int] = []  # boxes per batch, in step order (first 10000 batches)

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for batch in self.loader:
            counts = batch.pop("n_boxes")
            files = batch.pop("im_file", None)
            mx = int(counts.max()) if counts.numel() else 0
            if len(self.batch_boxes) < 10000:
                self.batch_boxes.append(int(counts.sum()))
            self.max_seen = max(self.max_seen, mx)
            if mx > self.max_boxes:
                over = (counts > self.max_boxes).nonzero().view(-1).tolist()
                self.truncated_images += len(over)
                if not self.warned:
                    self.warned = True
                    name = files[over[0]] if files else f"batch image {over[0]}"
                    LOG.warning(
                        "XLA: %s has %d boxes > max_boxes=%d; keeping the first %d (further truncations are "
                        "counted, not logged; raise max_boxes to avoid them)",
                        name, int(counts[over[0]]), self.max_boxes, self.max_boxes,
                    )
            yield batch


def build_train_loader(dataset, batch_size: int, workers: int, max_boxes: int, *, seed: int = 0):
    """Ultralytics-style ``InfiniteDataLoader`` over ``dataset`` with fixed batches.

    Like ``ultralytics.data.build.build_dataloader`` (same worker seeding, persistent workers,
    ``reset()`` for close_mosaic) but always ``drop_last=True`` and the padded collate.
    ``batch_size`` is the global batch (per-device batch x devices): under SPMD one process loads it
    and the trainer shards it over the devices.
    """
    import os

    from ultralytics.data.build import InfiniteDataLoader, seed_worker

    if len(dataset) < batch_size:
        raise ValueError(f"XLA training needs at least batch={batch_size} train images (drop_last), got {len(dataset)}")
    batches = len(dataset) // batch_size
    nw = min(os.cpu_count() or 1, max(int(workers), 0), 0 if batches <= 1 else batches)
    generator = torch.Generator()
    generator.manual_seed((6148914691236517205 + seed) % (1 << 64))  # Ultralytics' seed for rank 0
    return InfiniteDataLoader(
        dataset=dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=nw,
        prefetch_factor=4 if nw > 0 else None,
        pin_memory=False,
        collate_fn=PaddedCollate(dataset.collate_fn, max_boxes),
        worker_init_fn=seed_worker,
        generator=generator,
        drop_last=True,
    )
