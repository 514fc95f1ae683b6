"""A measuring hook for the tests, loaded by name in every training process (YOLO_ORCH_CALLBACKS,
set in conftest.py): with YOLO_ORCH_PROBE_DIR set, every rank writes probe-rank<R>.json there:
what the real trainer applied (batch per device, accumulate, optimizer param groups, warmup
iterations, loss scale, BatchNorm momenta) and the sample indices its sampler gave it each epoch.
tests/e2e/test_ddp_effective.py and tests/e2e/test_distributed.py compare these with the plan."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator.rundir import rank, write_text_atomic

PROBE_ENV = "YOLO_ORCH_PROBE_DIR"


class RankProbe:
    """Records, per rank, what the real trainer applied (for tests/e2e/test_ddp_effective.py and
    tests/e2e/test_distributed.py). Written atomically after the first batch and every epoch."""

    def __init__(self, trainer):
        """`trainer`: the Ultralytics trainer, or the YOLO model before training (whose callbacks
        the trainer copies)."""
        self.rank = rank()
        self.path = Path(os.environ[PROBE_ENV]) / f"probe-rank{max(self.rank, 0)}.json"
        self.data: dict = {"rank": self.rank, "epochs": []}
        self.images = 0
        self.batches = 0
        self.before_average: float | None = None  # the EMA's BatchNorm statistics before the trainer's epoch end
        trainer.add_callback("on_train_start", self.on_train_start)
        trainer.add_callback("on_train_batch_end", self.on_train_batch_end)
        # first among the epoch's end callbacks (the model's are copied into the trainer before its own)
        trainer.add_callback("on_train_epoch_end", lambda t: setattr(self, "before_average", ema_bn_sum(t)))

    def count_batches(self, t) -> None:
        """Count every batch the trainer preprocesses (the images this rank really trained on)."""
        preprocess = t.preprocess_batch

        def counted(batch):
            self.images += int(batch["img"].shape[0])
            self.batches += 1
            return preprocess(batch)

        t.preprocess_batch = counted

    def on_train_start(self, t) -> None:
        self.count_batches(t)  # every rank runs on_train_start, before its first batch
        # last among the epoch's end callbacks: after the trainer's own (worker/ddp_trainer.py averages the EMA's
        # BatchNorm statistics over the ranks there), which a callback added before training would precede
        t.add_callback("on_train_epoch_end", self.on_train_epoch_end)
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
            "bn_mode": getattr(t, "bn_mode", None),
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
        self.data["epochs"].append({"epoch": int(t.epoch), "images": self.images, "batches": self.batches,
                                    "indices": indices, "ema_bn_stats_sum": ema_bn_sum(t),
                                    "ema_bn_stats_sum_before": self.before_average})
        self.images = self.batches = 0
        self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(self.data, indent=1, default=str))


def ema_bn_sum(t) -> float:
    """The sum of the EMA model's BatchNorm running statistics (what its checkpoint saves)."""
    import torch

    return sum(float(m.running_mean.double().sum() + m.running_var.double().sum()) for m in t.ema.ema.modules()
               if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats)


def attach(model, run_dir: Path, resolved=None) -> None:  # resolved: the run's rundir.ResolvedRun
    if os.environ.get(PROBE_ENV):
        RankProbe(model)
