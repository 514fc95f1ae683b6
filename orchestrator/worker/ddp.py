"""One torchrun rank: rebuilds the Ultralytics trainer from job.resolved.yaml inside an existing
process group instead of letting Ultralytics pickle itself and respawn.

    python -m torch.distributed.run ... -m orchestrator.worker.ddp RUN_DIR

What differs from stock Ultralytics, and why (everything else is Ultralytics' own code path, so the
scaler's `effective` values hold: per-device batch = batch // world_size, accumulate from the TOTAL
batch, weight decay x batch*accumulate/nbs, loss x world_size, DistributedSampler, seeds seed+1+RANK):

- world_size comes from torchrun (WORLD_SIZE), not from the device string: Ultralytics counts the
  devices in `device=` (0 on CPU, and one node only), which is wrong for `cpu:N` and for MxN.
- `_setup_ddp` on CPU: gloo and the CPU device (Ultralytics only knows cuda/npu/xpu there).
  On GPUs Ultralytics' own `_setup_ddp` runs (NCCL, device = the LOCAL_RANK-th id of `device=`).
- the DDP wrap on CPU passes device_ids=None (Ultralytics passes [device.index], which DDP rejects
  for CPU modules), and converts BatchNorm to SyncBatchNorm first when `sync_bn: true`.
- the final validation of best.pt on CPU ranks: Ultralytics' standalone validator puts DDP ranks on
  `cuda:<current device>`; on CPU it gets the CPU.
- Ultralytics never respawns: it is already a rank (LOCAL_RANK is set), and `ddp` is forced off.

Process hygiene and logs: every rank dies with its torchrun agent (PR_SET_PDEATHSIG), writes
`rank<RANK>.log` into the run dir, and the first rank of each node (LOCAL_RANK 0) also tees to
torchrun's stdout, i.e. the run's train.log.

Test probe: with YOLO_ORCH_PROBE_DIR set, every rank writes probe-rank<R>.json there: the values the
real trainer applied (batch per device, accumulate, optimizer param groups, warmup iterations,
loss scale) and the sample indices its sampler gave it each epoch.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import sys
import threading
from datetime import timedelta
from pathlib import Path

PROBE_ENV = "YOLO_ORCH_PROBE_DIR"
BN_ENV = "YOLO_ORCH_DDP_BN"  # "match" (default): BN running statistics as in one process; "stock": Ultralytics as is


# ---------------------------------------------------------------- process-level setup (no torch)


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Linux: the kernel kills this rank when its torchrun agent dies, even by SIGKILL (torchrun
    starts every worker in its own session, so signalling the agent's process group misses them)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the agent died before prctl took effect
        os.kill(os.getpid(), sig)


class _Tee:
    """fd-level tee of stdout+stderr into a file and the original stdout (C code, subprocesses and
    Python all write to fd 1/2, so a sys.stdout wrapper would miss most of it)."""

    def __init__(self, log_fd: int):
        self.log_fd = log_fd
        self.orig = os.dup(1)
        r, w = os.pipe()
        os.dup2(w, 1)
        os.dup2(w, 2)
        os.close(w)
        self.r = r
        self.thread = threading.Thread(target=self._pump, name="rank-log-tee", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self.r, 65536)
            except OSError:
                return
            if not chunk:
                return
            for fd in (self.orig, self.log_fd):
                try:
                    os.write(fd, chunk)
                except OSError:
                    pass

    def close(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os.dup2(self.orig, 1)  # drop our ends of the pipe: the pump sees EOF once children let go too
        os.dup2(self.orig, 2)
        self.thread.join(timeout=5)


def redirect_output(run_dir: Path, rank: int, local_rank: int) -> _Tee | None:
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    fd = os.open(run_dir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    if local_rank == 0:
        tee = _Tee(fd)
        atexit.register(tee.close)
        return tee
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return None


# ---------------------------------------------------------------- torch side


def _nn_with_ddp(wrap):
    """A faithful copy of the `torch.nn` module whose `parallel.DistributedDataParallel` is `wrap`.

    It stands in for `nn` inside ultralytics.engine.trainer while `_setup_train` builds the DDP
    wrapper. A copy, not a proxy: `build_optimizer` (later in `_setup_train`) lists the norm layer
    classes from `nn.__dict__` to keep BatchNorm weights out of weight decay; a stand-in without
    them silently gave every BatchNorm weight weight decay (caught by the cpu vs cpu:2 parity run).
    The trainer also restores the real module as soon as the wrap is built."""
    import types

    import torch.nn
    import torch.nn.parallel

    parallel = types.ModuleType(torch.nn.parallel.__name__)
    parallel.__dict__.update(torch.nn.parallel.__dict__)
    parallel.DistributedDataParallel = wrap
    nn = types.ModuleType(torch.nn.__name__)
    nn.__dict__.update(torch.nn.__dict__)
    nn.parallel = parallel
    return nn


def bn_momentum_factor(plan: dict) -> float:
    """How many times fewer batches per epoch each rank runs than the reference did.

    BatchNorm running statistics (what validation and the saved model use) move once per forward
    pass with a fixed momentum (Ultralytics: 0.03). Each of W ranks runs 1/W of the batches of an
    epoch, so with the same momentum the running statistics would take W times as many EPOCHS to
    follow the weights; early in short runs they lag, and validation suffers (the cpu vs cpu:2
    parity run showed it). With momentum m' = 1 - (1 - m)^k, k = reference batches per epoch / this
    rank's, the running statistics cover the same number of epochs as at the reference."""
    scaling = plan.get("scaling") or {}
    eff, ref = scaling.get("effective") or {}, scaling.get("reference_effective") or {}
    if eff.get("batches_per_epoch") and ref.get("batches_per_epoch"):
        return ref["batches_per_epoch"] / eff["batches_per_epoch"]
    if eff.get("batch_per_device") and ref.get("batch_per_device"):
        return (eff["batch_per_device"] * eff["world_size"]) / (ref["batch_per_device"] * max(ref["world_size"], 1))
    return float(plan.get("world_size") or 1)


def make_trainer_class(base, sync_bn: bool = False, bn_momentum_factor: float = 1.0):
    """A subclass of the Ultralytics trainer `base` that runs as one rank of a torchrun job."""
    import torch
    import torch.distributed as dist
    from ultralytics.utils import LOCAL_RANK, LOGGER, RANK

    class TorchrunTrainer(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            world = int(os.environ.get("WORLD_SIZE", "1"))
            if world > 1:
                # Ultralytics counts the devices in `device=` (0 on CPU, one node): use torchrun's world.
                self.world_size = world
            self.ddp = False  # already a rank: never pickle and respawn under torch.distributed.run
            self.sync_bn = bool(sync_bn) and self.world_size > 1
            self.bn_mode = os.environ.get(BN_ENV, "match")
            if self.bn_mode not in ("match", "stock"):
                raise ValueError(f"{BN_ENV}={self.bn_mode!r}: expected 'match' or 'stock'")
            match = self.world_size > 1 and self.bn_mode == "match"
            self.bn_momentum_factor = float(bn_momentum_factor) if match else 1.0
            if match:
                self.add_callback("on_train_epoch_end", lambda t: t._average_bn_statistics())
            self._bn_momenta: dict[str, float] = {}
            self._probe = RankProbe(self) if os.environ.get(PROBE_ENV) else None

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
                from orchestrator.worker.sync_bn import convert_sync_batchnorm, count_sync

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
                from orchestrator.worker.sync_bn import revert_sync_batchnorm

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
            if self.world_size > 1 and int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size)) < self.world_size:
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
            from types import SimpleNamespace

            auto_backend, backend_of = validator_module.AutoBackend, validator_module.get_torch_device_backend

            def cpu_auto_backend(*args, device=None, **kwargs):
                return auto_backend(*args, device=torch.device("cpu"), **kwargs)

            validator_module.AutoBackend = cpu_auto_backend
            validator_module.get_torch_device_backend = lambda *a, **k: SimpleNamespace(current_device=lambda: 0)
            try:
                return super().final_eval()
            finally:
                validator_module.AutoBackend, validator_module.get_torch_device_backend = auto_backend, backend_of

        def preprocess_batch(self, batch):
            if self._probe is not None:
                self._probe.count(batch)
            return super().preprocess_batch(batch)

    TorchrunTrainer.__name__ = TorchrunTrainer.__qualname__ = f"Torchrun{base.__name__}"
    return TorchrunTrainer


class RankProbe:
    """Records, per rank, what the real trainer applied (for tests/test_ddp_effective.py and
    tests/test_distributed.py). Written atomically after the first batch and every epoch."""

    def __init__(self, trainer):
        self.rank = int(os.environ.get("RANK", "-1"))
        self.path = Path(os.environ[PROBE_ENV]) / f"probe-rank{max(self.rank, 0)}.json"
        self.data: dict = {"rank": self.rank, "epochs": []}
        self.images = 0
        self.batches = 0
        trainer.add_callback("on_train_start", self.on_train_start)
        trainer.add_callback("on_train_batch_end", self.on_train_batch_end)
        trainer.add_callback("on_train_epoch_end", self.on_train_epoch_end)

    def count(self, batch) -> None:
        self.images += int(batch["img"].shape[0])
        self.batches += 1

    def on_train_start(self, t) -> None:
        import torch
        import torch.distributed as dist

        from orchestrator.worker.sync_bn import count_sync

        loader = t.train_loader
        sampler = loader.sampler
        groups = [{"param_group": g.get("param_group"), "lr": g.get("initial_lr", g["lr"]),
                   "weight_decay": g["weight_decay"], "params": len(g["params"])} for g in t.optimizer.param_groups]
        self.data.update({
            "world_size": t.world_size,
            "backend": dist.get_backend() if dist.is_initialized() else None,
            "device": str(t.device),
            "amp": bool(t.amp),
            "bn_mode": t.bn_mode,
            "batch": t.batch_size,
            "batch_per_device": loader.batch_size,
            "nbs": t.args.nbs,
            "accumulate": t.accumulate,
            "optimizer": type(t.optimizer).__name__,
            "param_groups": groups,
            # what Ultralytics' build_optimizer keeps out of weight decay (its own test: "Norm" in the class name)
            "norm_layers": sum(1 for m in t.model.modules()
                               if isinstance(m, tuple(v for k, v in torch.nn.__dict__.items() if "Norm" in k))),
            "batches_per_epoch": len(loader),
            "warmup_iterations": t._get_warmup_iterations(len(loader)),
            "dataset_size": len(loader.dataset),
            "sampler": type(sampler).__name__ if sampler is not None else None,
            "samples_per_device": len(sampler) if sampler is not None else len(loader.dataset),
            "ddp_wrapped": type(t.model).__name__,
            "sync_bn_layers": count_sync(t.model),
            "bn_momentum": sorted({m.momentum for m in t.model.modules()
                                   if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}),
            "ema_bn_momentum": sorted({m.momentum for m in t.ema.ema.modules()
                                       if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)}),
            "ema_sync_bn_layers": count_sync(t.ema.ema),
        })

    def on_train_batch_end(self, t) -> None:
        if "loss_scale" not in self.data and t.loss_items is not None:
            items = t.loss_items.values() if isinstance(t.loss_items, dict) else t.loss_items
            total = float(sum(float(v) for v in items))
            self.data["loss_scale"] = float(t.loss.detach()) / total if total else None
            self._write()

    def on_train_epoch_end(self, t) -> None:
        sampler = t.train_loader.sampler
        indices = [int(i) for i in iter(sampler)] if sampler is not None else None
        import torch

        bn_sum = sum(float(m.running_mean.double().sum() + m.running_var.double().sum()) for m in t.ema.ema.modules()
                     if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats)
        self.data["epochs"].append({"epoch": int(t.epoch), "images": self.images, "batches": self.batches,
                                    "indices": indices, "ema_bn_stats_sum": bn_sum})
        self.images = self.batches = 0
        self._write()

    def _write(self) -> None:
        from orchestrator.rundir import write_text_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(self.data, indent=1, default=str))


def trainer_factory(resolved: dict):
    """train.train() calls this after the offline setup: the trainer class for this rank."""
    import torch

    devices = str(resolved["plan"]["devices"])
    if devices == "cpu" or devices.startswith("cpu:") or "xcpu:" in devices:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(local_world, 1)))
    from ultralytics.models.yolo.detect import DetectionTrainer

    return make_trainer_class(DetectionTrainer, sync_bn=bool(resolved["job"].get("sync_bn", False)),
                              bn_momentum_factor=bn_momentum_factor(resolved["plan"]))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: torchrun ... -m orchestrator.worker.ddp RUN_DIR", file=sys.stderr)
        return 2
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        print("orchestrator.worker.ddp runs under torchrun (RANK/WORLD_SIZE unset); "
              "use orchestrator.worker.train for one process", file=sys.stderr)
        return 2
    run_dir = Path(argv[0]).resolve()
    die_with_parent()
    redirect_output(run_dir, int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")))
    from orchestrator.worker.train import train

    try:
        code = train(run_dir, trainer_factory=trainer_factory)
    finally:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    if code == 0 and int(os.environ["RANK"]) != 0 and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        node_summary(run_dir)
    return code


def node_summary(run_dir: Path) -> None:
    """A node without global rank 0 (multi-node): its run dir gets a summary too, so its
    orchestrator reports the finished state; metrics, events and weights are in node 0's run dir."""
    from orchestrator.rundir import SUMMARY, write_json_atomic

    if (run_dir / SUMMARY).exists():
        return
    write_json_atomic(run_dir / SUMMARY, {
        "state": "finished",
        "primary": False,
        "node_rank": int(os.environ.get("GROUP_RANK", "0")),
        "world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "metrics": {},
        "note": "global rank 0 ran on node 0: its run dir holds events.jsonl, the metrics and the weights",
    })


if __name__ == "__main__":
    sys.exit(main())
