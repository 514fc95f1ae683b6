"""Run by tests/e2e/test_distributed.py: GlooSyncBatchNorm over 2 gloo processes vs one nn.BatchNorm2d
over the concatenated batch. Usage: python helpers_sync_bn.py OUT_DIR PORT (prints SYNC_BN_OK)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD, C = 2, 4


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2 * WORLD, C, 5, 5, generator=g) * 3 + 1.5
    grad_out = torch.randn(x.shape, generator=g)
    w, b = torch.rand(C, generator=g) + 0.5, torch.randn(C, generator=g)
    return x, grad_out, w, b


def rank_main(rank: int, out: str, port: int) -> None:
    from orchestrator.worker.sync_bn import GlooSyncBatchNorm

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    x, grad_out, w, b = data()
    sl = slice(2 * rank, 2 * rank + 2)
    bn = GlooSyncBatchNorm(C)
    with torch.no_grad():
        bn.weight.copy_(w)
        bn.bias.copy_(b)
    xr = x[sl].clone().requires_grad_(True)
    y = bn(xr)
    (y * grad_out[sl]).sum().backward()
    torch.save({"y": y.detach(), "x_grad": xr.grad, "w_grad": bn.weight.grad, "b_grad": bn.bias.grad,
                "running_mean": bn.running_mean, "running_var": bn.running_var}, Path(out) / f"rank{rank}.pt")
    dist.destroy_process_group()


def main() -> None:
    out, port = sys.argv[1], int(sys.argv[2])
    mp.spawn(rank_main, args=(out, port), nprocs=WORLD, join=True)
    x, grad_out, w, b = data()
    ref = torch.nn.BatchNorm2d(C)
    with torch.no_grad():
        ref.weight.copy_(w)
        ref.bias.copy_(b)
    xf = x.clone().requires_grad_(True)
    y = ref(xf)
    (y * grad_out).sum().backward()
    r = [torch.load(Path(out) / f"rank{i}.pt") for i in range(WORLD)]
    close = lambda a, e: torch.allclose(a, e, atol=1e-5, rtol=1e-4)  # noqa: E731
    checks = {
        "output": close(torch.cat([q["y"] for q in r]), y.detach()),
        "input grad": close(torch.cat([q["x_grad"] for q in r]), xf.grad),
        "weight grad": close(sum(q["w_grad"] for q in r), ref.weight.grad),
        "bias grad": close(sum(q["b_grad"] for q in r), ref.bias.grad),
        "running mean": all(close(q["running_mean"], ref.running_mean) for q in r),
        "running var": all(close(q["running_var"], ref.running_var) for q in r),
    }
    bad = [k for k, ok in checks.items() if not ok]
    if bad:
        print("MISMATCH:", bad)
        sys.exit(1)
    print("SYNC_BN_OK")


if __name__ == "__main__":
    main()
