"""The Ultralytics trainer as one torchrun rank (orchestrator/worker/ddp.py says what differs from
stock Ultralytics and why). Imported only inside a rank, after the offline setup: torch at the top."""

from __future__ import annotations

import os
import types
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn.parallel
from ultralytics.utils import LOCAL_RANK, LOGGER, RANK

from orchestrator.rundir import Ranks
from orchestrator.worker.sync_bn import convert_sync_batchnorm, count_sync, revert_sync_batchnorm

BN_ENV = "YOLO_ORCH_DDP_BN"  # "match" (default): BN running statistics as in one process; "stock": Ultralytics as is


def make_trainer_class(base, sync_bn: bool = False, bn_momentum_factor: float = 1.0):
    """A subclass of the Ultralytics trainer `base` that runs as one rank of a torchrun job."""
    name = f"Torchrun{base.__name__}"
    return type(name, (TorchrunTrainerMixin, base), {"_sync_bn_wanted": bool(sync_bn),
                                                     "_bn_factor": float(bn_momentum_factor),
                                                     "__qualname__": name, "__module__": __name__})


class TorchrunTrainerMixin:
    """Put before an Ultralytics trainer class (make_trainer_class): the methods that make it one rank
    of a torchrun job. `_sync_bn_wanted` and `_bn_factor` are set on the class it makes."""

    _sync_bn_wanted = False
    _bn_factor = 1.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        world = Ranks.here().world_size
        if world > 1:
            # Ultralytics counts the devices in `device=` (0 on CPU, one node): use torchrun's world.
            self.world_size = world
        self.ddp = False  # already a rank: never pickle and respawn under torch.distributed.run
        self.sync_bn = bool(self._sync_bn_wanted) and self.world_size > 1
        self.bn_mode = os.environ.get(BN_ENV, "match")
        if self.bn_mode not in ("match", "stock"):
            raise ValueError(f"{BN_ENV}={self.bn_mode!r}: expected 'match' or 'stock'")
        match = self.world_size > 1 and self.bn_mode == "match"
        self.bn_momentum_factor = float(self._bn_factor) if match else 1.0
        if match:
            self.add_callback("on_train_epoch_end", lambda t: t._average_bn_statistics())
        self._bn_momenta: dict[str, float] = {}

    # -- process group
    def _setup_ddp(self):
        if self.device.type != "cpu":
            return super()._setup_ddp()  # NCCL, device = LOCAL_RANK-th id of device=
        self.accelerator = None
        dist.init_process_group(backend="gloo", timeout=timedelta(seconds=10800), rank=RANK,
                                world_size=self.world_size)
        LOGGER.info(f"DDP: rank {RANK}/{self.world_size} (local {LOCAL_RANK}) on cpu over gloo")

    # -- DDP wrap (and SyncBN before it)
    def _wrap_ddp(self, module, device_ids=None, **kwargs):
        import ultralytics.engine.trainer as trainer_module

        trainer_module.nn = torch.nn  # the stand-in served its one purpose
        cpu = self.device.type == "cpu"
        self._scale_bn_momentum(module)
        if self.sync_bn:
            module = convert_sync_batchnorm(module, cpu=cpu)
            n = count_sync(module)
            LOGGER.info(f"DDP: sync_bn: {n} BatchNorm layers synchronised over {self.world_size} ranks")
        return torch.nn.parallel.DistributedDataParallel(module, device_ids=None if cpu else device_ids, **kwargs)

    def _setup_train(self):
        import ultralytics.engine.trainer as trainer_module

        nn_module = trainer_module.nn
        trainer_module.nn = _nn_with_ddp(self._wrap_ddp)
        try:
            super()._setup_train()
        finally:
            trainer_module.nn = nn_module
        if self.sync_bn and self.ema is not None:
            self.ema.ema = revert_sync_batchnorm(self.ema.ema)  # checkpoints hold plain BatchNorm2d
        if self._bn_momenta and self.ema is not None:  # checkpoints keep the model's own momentum
            for name, m in self.ema.ema.named_modules():
                if name in self._bn_momenta:
                    m.momentum = self._bn_momenta[name]

    def _average_bn_statistics(self):
        """Average the EMA's BatchNorm running statistics over the ranks at the end of every epoch
        (before validation and the checkpoint; Ultralytics then broadcasts rank 0's buffers).
        Each rank's running statistics see only its own shard; one process's see every batch.
        The average covers as many batches as one process's would (cf. timm's distribute_bn)."""
        if self.ema is None:
            return
        bns = [m for m in self.ema.ema.modules()
               if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
        bufs = [b for m in bns for b in (m.running_mean, m.running_var)]
        if not bufs:
            return
        flat = torch.cat([b.detach().flatten().float() for b in bufs])
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        with torch.no_grad():
            for b in bufs:
                b.copy_(flat[offset:offset + b.numel()].view_as(b).to(b.dtype))
                offset += b.numel()

    def _scale_bn_momentum(self, module):
        k = self.bn_momentum_factor
        if abs(k - 1.0) < 1e-9:
            return
        for name, m in module.named_modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.momentum is not None:
                self._bn_momenta[name] = m.momentum
                m.momentum = 1.0 - (1.0 - m.momentum) ** k
        if self._bn_momenta:
            old = sorted(set(self._bn_momenta.values()))
            LOGGER.info(f"DDP: BatchNorm momentum {old} -> 1-(1-m)^{k:g} for {len(self._bn_momenta)} layers "
                        f"(each rank runs {k:g}x fewer batches per epoch than the reference)")

    # -- final validation of best.pt: every rank takes part (distributed validation)
    def _share_best(self):
        """Several nodes: each node's orchestrator has its own run dir, so the ranks not on node 0
        lack weights/best.pt, skip the final validation and leave the others waiting in its
        gather. Rank 0 sends them the file (only to ranks that cannot see it)."""
        info = [self.best.exists() if RANK == 0 else None]
        dist.broadcast_object_list(info, 0)
        need = bool(info[0]) and not self.best.exists()
        needs = [None] * self.world_size
        dist.all_gather_object(needs, need)
        if any(needs):
            payload = [self.best.read_bytes() if RANK == 0 else None]
            dist.broadcast_object_list(payload, 0)
            if need:
                self.wdir.mkdir(parents=True, exist_ok=True)
                tmp = self.best.with_name(f".{self.best.name}.rank{RANK}.tmp")  # a node's ranks write at once
                tmp.write_bytes(payload[0])
                tmp.replace(self.best)
        return need

    def final_eval(self):
        received = False
        if self.world_size > 1 and Ranks.here().spans_nodes:
            received = self._share_best()
        try:
            self._final_eval()
        finally:
            if received:
                self.best.unlink(missing_ok=True)  # a temporary copy: node 0's run dir has the real one

    def _final_eval(self):
        if self.device.type != "cpu" or self.world_size <= 1:
            return super().final_eval()
        import ultralytics.engine.validator as validator_module

        auto_backend = validator_module.AutoBackend

        def cpu_auto_backend(*args, device=None, **kwargs):
            return auto_backend(*args, device=torch.device("cpu"), **kwargs)

        # the validator's DDP branch asks the accelerator for its device: get_torch_device_backend (8.4.111
        # on), torch.cuda.current_device before; on CPU ranks it must not (there is no CUDA)
        patches = [(validator_module, "AutoBackend", cpu_auto_backend)]
        if hasattr(validator_module, "get_torch_device_backend"):
            patches.append((validator_module, "get_torch_device_backend",
                            lambda *a, **k: SimpleNamespace(current_device=lambda: 0)))
        else:
            patches.append((torch.cuda, "current_device", lambda: 0))
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
        for owner, name, value in patches:
            setattr(owner, name, value)
        try:
            return super().final_eval()
        finally:
            for owner, name, value in saved:
                setattr(owner, name, value)


def _nn_with_ddp(wrap):
    """A faithful copy of the `torch.nn` module whose `parallel.DistributedDataParallel` is `wrap`.

    It stands in for `nn` inside ultralytics.engine.trainer while `_setup_train` builds the DDP
    wrapper. A copy, not a proxy: `build_optimizer` (later in `_setup_train`) lists the norm layer
    classes from `nn.__dict__` to keep BatchNorm weights out of weight decay; a stand-in without
    them silently gave every BatchNorm weight weight decay (caught by the cpu vs cpu:2 parity run).
    The trainer also restores the real module as soon as the wrap is built."""
    parallel = types.ModuleType(torch.nn.parallel.__name__)
    parallel.__dict__.update(torch.nn.parallel.__dict__)
    parallel.DistributedDataParallel = wrap
    nn = types.ModuleType(torch.nn.__name__)
    nn.__dict__.update(torch.nn.__dict__)
    nn.parallel = parallel
    return nn
