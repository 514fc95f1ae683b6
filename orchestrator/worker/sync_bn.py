"""SyncBatchNorm for the orchestrator's DDP ranks.

Why: BatchNorm statistics are computed per device. At a small per-device batch (e.g. 4 images of a
16-image total batch over 4 GPUs) the per-device mean/variance are noisy and differ from what a
single device with the whole batch would compute; SyncBatchNorm reduces them over all ranks, so the
normalisation matches one BatchNorm over the global batch (at the cost of two collectives per BN
layer per step). Off by default (`sync_bn: false`), as in Ultralytics, which has no SyncBN at all.

On GPUs: torch.nn.SyncBatchNorm. On CPU: torch.nn.SyncBatchNorm refuses CPU tensors in training
(torch 2.9: "SyncBatchNorm expected input tensor to be on GPU or XPU"), so `GlooSyncBatchNorm`
does the same maths with differentiable all_reduces that gloo supports.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class GlooSyncBatchNorm(nn.BatchNorm2d):
    """BatchNorm2d whose training statistics are reduced over the default process group (CPU
    tensors, any backend). Two differentiable all_reduces per layer: (per-channel sum, count), then
    the per-channel sum of centred squares; backward all-reduces their gradients. Eval mode, or no
    process group, is plain BatchNorm2d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        self._check_input_dim(x)
        c = x.shape[1]
        local = torch.cat([x.sum(dim=(0, 2, 3)), x.new_tensor([x.numel() / c])])
        total = all_reduce(local)  # SUM over ranks
        n = total[c]
        mean = total[:c] / n
        xc = x - mean.view(1, c, 1, 1)
        var = all_reduce((xc * xc).sum(dim=(0, 2, 3))) / n  # biased, as BatchNorm normalises with
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                m = self.momentum if self.momentum is not None else 1.0 / float(self.num_batches_tracked)
                count = float(n)
                self.running_mean.mul_(1 - m).add_(mean.detach(), alpha=m)
                self.running_var.mul_(1 - m).add_(var.detach() * (count / max(count - 1.0, 1.0)), alpha=m)
        y = xc * torch.rsqrt(var + self.eps).view(1, c, 1, 1)
        if self.affine:
            y = y * self.weight.view(1, c, 1, 1) + self.bias.view(1, c, 1, 1)
        return y


def _is_sync(m: nn.Module) -> bool:
    return isinstance(m, (nn.SyncBatchNorm, GlooSyncBatchNorm))


def convert_sync_batchnorm(module: nn.Module, cpu: bool) -> nn.Module:
    """BatchNorm -> SyncBatchNorm before the DDP wrap: torch's on GPUs, GlooSyncBatchNorm on CPU."""
    if not cpu:
        return nn.SyncBatchNorm.convert_sync_batchnorm(module)
    return _swap(module, lambda m: type(m) is nn.BatchNorm2d, GlooSyncBatchNorm)


def revert_sync_batchnorm(module: nn.Module) -> nn.Module:
    """Every SyncBatchNorm back to nn.BatchNorm2d (same parameters and buffers, shared): checkpoints
    then load and run anywhere, without a process group or this package."""
    return _swap(module, _is_sync, nn.BatchNorm2d)


def count_sync(module: nn.Module) -> int:
    return sum(1 for m in module.modules() if _is_sync(m))


def _swap(module: nn.Module, match, cls) -> nn.Module:
    out = module
    if match(module):
        out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats)
        if module.affine:
            out.weight = module.weight
            out.bias = module.bias
        if module.track_running_stats:
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
        out.train(module.training)
        if hasattr(module, "qconfig"):
            out.qconfig = module.qconfig
    for name, child in module.named_children():
        out.add_module(name, _swap(child, match, cls))
    return out
