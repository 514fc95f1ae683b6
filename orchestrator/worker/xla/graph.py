"""Rewrites that keep the XLA training step one traced graph: zero momentum buffers and gradients
that exist from step 0, scalars that are not shared between tensors, and nearest upsampling as
expand + reshape (no data-dependent lowering)."""

from __future__ import annotations

import torch
from torch import nn


def prime_sgd_momentum(optimizer: torch.optim.Optimizer) -> None:
    """Create SGD momentum buffers as zeros before the first step.

    torch's SGD creates ``buf = grad.clone()`` on the first step and does
    ``buf.mul_(momentum).add_(grad)`` afterwards; with dampening 0 both give exactly ``grad``
    when the buffer starts at zero, so this changes no number, but the first step then traces
    the same graph as all later ones (one compilation less). Other optimizers are left alone.
    """
    if type(optimizer) is not torch.optim.SGD:
        return
    for g in optimizer.param_groups:
        if g.get("dampening", 0) != 0 or g.get("momentum", 0) == 0:
            continue
        for p in g["params"]:
            st = optimizer.state[p]
            if p.requires_grad and st.get("momentum_buffer") is None:
                st["momentum_buffer"] = device_zeros(p)


def unalias_scalars(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Give every 0-dim device tensor (BN ``num_batches_tracked``, Adam ``step``) its own buffer.

    torch_xla uploads a 0-dim host tensor through its scalar cache, so equal values (all BN
    counters start at 0) share one device buffer. The first step then sees aliased inputs and
    traces a graph with fewer parameters than every later step: one extra compilation. Uploading
    them as 1-element tensors and viewing them as 0-dim avoids the cache.
    """

    def fresh(t: torch.Tensor) -> torch.Tensor:
        return t.detach().cpu().reshape(1).to(t.device).reshape(())

    for mod in model.modules():
        for k, b in list(mod._buffers.items()):
            if b is not None and b.dim() == 0 and b.device.type != "cpu":
                mod._buffers[k] = fresh(b)
    if optimizer is not None:
        for st in optimizer.state.values():
            for k, v in list(st.items()):
                if isinstance(v, torch.Tensor) and v.dim() == 0 and v.device.type != "cpu":
                    st[k] = fresh(v)


class NearestUpsample(nn.Module):
    """``nn.Upsample(scale_factor=k, mode='nearest')`` for an integer k, as expand + reshape.

    Same numbers forward; the backward is a plain sum over each k x k block. torch_xla lowers
    ``upsample_nearest2d_backward`` only for TPU/Neuron; elsewhere (XLA:CPU here) it falls back
    to the host, which cuts every step into three graphs with device->host copies between.
    Used only on the device copy of the model: checkpoints keep Ultralytics' own modules.
    """

    def __init__(self, scale: int):
        super().__init__()
        self.scale = int(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        k = self.scale
        return x[:, :, :, None, :, None].expand(b, c, h, k, w, k).reshape(b, c, h * k, w * k)


def lower_nearest_upsample(model: nn.Module) -> int:
    """Swap integer-scale nearest nn.Upsample layers for NearestUpsample; returns how many."""
    n = 0
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            sf = getattr(child, "scale_factor", None)
            if type(child) is nn.Upsample and child.mode == "nearest" and child.size is None and sf is not None:
                sfs = sf if isinstance(sf, (tuple, list)) else (sf, sf)
                if len(set(sfs)) == 1 and float(sfs[0]).is_integer():
                    new = NearestUpsample(int(sfs[0]))
                    for attr in ("i", "f", "type", "np"):  # Ultralytics' layer routing attributes
                        if hasattr(child, attr):
                            setattr(new, attr, getattr(child, attr))
                    setattr(parent, name, new)
                    n += 1
    return n


def device_zeros(like: torch.Tensor) -> torch.Tensor:
    """Zeros sent from the host: a buffer of its own.

    ``torch.zeros_like`` on the device is a traced op; equal-shaped ones can come out of one
    graph sharing a buffer, and the next step then sees aliased inputs: a different graph.
    """
    return torch.zeros(like.shape, dtype=like.dtype).to(like.device)
