"""XLA (TPU) training backend for Ultralytics detection models.

Ultralytics rejects XLA devices, and its loss has data-dependent shapes (see ``loss.py``). This
module trains an Ultralytics ``DetectionModel`` on XLA with Ultralytics' own machinery wherever it
can be reused unchanged:

- ``XLADetectionTrainer`` subclasses Ultralytics' ``DetectionTrainer`` (constructed with
  ``device='cpu'`` so Ultralytics' device parsing is happy) and only replaces ``_setup_train``,
  ``_do_train``, ``optimizer_step`` and checkpoint writing. Reused as is: config/args handling,
  ``check_resume``, dataset check, ``build_dataset`` (same augmentation), ``get_model``/
  ``setup_model``, ``build_optimizer`` (param groups: decay on weights only), ``_setup_scheduler``
  (linear / cosine LambdaLR with lrf), ``_get_warmup_iterations``, ``set_class_weights``,
  ``_close_dataloader_mosaic``, ``resume_training``, ``save_metrics`` (results.csv),
  ``EarlyStopping``, ``ModelEMA``, ``DetectionValidator`` and ``strip_optimizer``.
- The training step: the padded batch (``data.py``) goes through ``MpDeviceLoader``; forward,
  ``XLADetectionLoss`` (``loss.py``), backward, and on optimizer steps: all-reduce
  (``xm.reduce_gradients``), ``clip_grad_norm_(10)``, ``optimizer.step()``, EMA update. It is one
  traced graph per iteration, cut by the loader's ``torch_xla.sync()``; nothing reads a device
  value inside the epoch. Warmup (np.interp of lr/momentum/accumulate), accumulation to ``nbs``
  and weight decay ``weight_decay*batch*accumulate/nbs`` are Ultralytics' formulas with
  ``batch`` the TOTAL batch over all cores.
- Validation runs at epoch end on the host CPU from the EMA weights, with Ultralytics'
  ``DetectionValidator`` in its in-training mode (val losses included), so metrics are Ultralytics'.
  The final evaluation validates ``best.pt`` exactly like ``BaseTrainer.final_eval``.

Graph count: with ``accumulate == 1`` and no warmup, ONE step graph, compiled at step 0 and reused
by every later step, whatever the box counts; warmup and accumulation add a few fixed variants
(table in docs/tpu.md).

Entry points: ``train_xla(args, run_dir, ...)`` and ``python -m orchestrator.worker.xla.trainer``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
import warnings
from copy import deepcopy
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from ultralytics.models.yolo.detect import DetectionTrainer
from ultralytics.models.yolo.detect.val import DetectionValidator
from ultralytics.utils import LOGGER
from ultralytics.utils import callbacks as ul_callbacks
from ultralytics.utils.checks import check_imgsz
from ultralytics.utils.torch_utils import EarlyStopping, ModelEMA, copy_attr, strip_optimizer, unset_deterministic

from .checkpoint import build_checkpoint, optimizer_state_to_cpu, to_cpu, write_checkpoints
from .data import HostBatches, build_train_loader
from .loss import build_xla_criterion

__all__ = ["train_xla", "XLADetectionTrainer", "xla_available", "configure_xla_env", "main"]

LOG = logging.getLogger("orchestrator.worker.xla")
RESULT_FILE = "xla_result.json"
# Attributes the EMA copies from the model at epoch end (as BaseTrainer).
_EMA_ATTRS = ["yaml", "nc", "args", "names", "stride", "class_weights"]


def configure_xla_env() -> None:
    """Environment the backend wants before torch_xla initializes (no-op for keys already set).

    ``XLA_NO_SPECIAL_SCALARS=1``: by default torch_xla bakes the Python scalars 0 and 1 into the
    graph as constants and passes all others as device data, so a learning rate that is exactly
    0.0 (the first warmup step) or 1.0 would trace a different graph and compile again. With the
    flag every Python scalar is device data and lr/momentum/EMA-decay changes never recompile.
    """
    os.environ.setdefault("XLA_NO_SPECIAL_SCALARS", "1")


def xla_available() -> tuple[bool, str]:
    """(True, '') if torch_xla imports, else (False, reason)."""
    try:
        import torch_xla  # noqa: F401
        import torch_xla.core.xla_model  # noqa: F401
    except Exception as e:  # ImportError, or a broken install (e.g. torch version mismatch)
        return False, f"torch_xla not importable: {type(e).__name__}: {e}"
    return True, ""


# ------------------------------------------------------------------------------------ metrics


def _compile_count() -> int:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return int(data[0]) if data else 0


def _compile_seconds() -> float:
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return float(data[1]) / 1e9 if data else 0.0  # accumulator is in ns


def _fallback_ops() -> dict[str, int]:
    """Ops that fell back to the CPU (e.g. ``aten::nonzero``, ``_local_scalar_dense`` = .item())."""
    import torch_xla.debug.metrics as met

    return {n: int(met.counter_value(n) or 0) for n in met.counter_names() if n.startswith("aten::")}


class StepLog:
    """Per-step compile counts and wall times (host side only: no device reads).

    The loader's ``torch_xla.sync()`` at the top of step k+1 compiles (if needed) and launches
    step k's graph, so the count read there is attributed to step k.
    """

    def __init__(self):
        self.compiles: list[int] = []  # cumulative CompileTime count after each step
        self.times: list[float] = []  # wall seconds of each step (to the next step's start)
        self.trace: list[float] = []  # host seconds spent tracing each step (the loop body)
        self.start_count = 0  # CompileTime count before the first step
        self._t: float | None = None

    def begin(self):
        self.start_count = _compile_count()

    def start(self):
        """Called at the top of each iteration, after the loader's sync for the previous step."""
        now = time.perf_counter()
        self._close(now)
        self._t = now

    def traced(self):
        """Called at the end of the loop body: the host time spent building the step's graph."""
        if self._t is not None:
            self.trace.append(time.perf_counter() - self._t)

    def end_epoch(self):
        self._close(time.perf_counter())
        self._t = None

    def _close(self, now):
        if self._t is not None:
            self.compiles.append(_compile_count())
            self.times.append(now - self._t)

    def summary(self) -> dict[str, Any]:
        steps = len(self.compiles)
        prev = [self.start_count] + self.compiles[:-1]
        grew = [i for i in range(steps) if self.compiles[i] > prev[i]]
        last = grew[-1] if grew else -1
        steady = self.times[last + 1 :]
        steady_trace = self.trace[last + 1 : len(self.times)]
        return {
            "xla/compile_count": _compile_count(),
            "xla/compile_time_s": round(_compile_seconds(), 3),
            "xla/train_steps": steps,
            "xla/compile_steps": grew,  # step indices whose graph had to be compiled
            "xla/compiles_per_step": [c - self.start_count for c in self.compiles],  # cumulative
            "xla/step_times_s": [round(t, 4) for t in self.times],
            "xla/steady_step_time_s": round(float(np.median(steady)), 5) if steady else None,
            "xla/steady_steps": len(steady),
            # host time to trace one step; if it is close to the step time, the run is host-bound
            "xla/steady_trace_time_s": round(float(np.median(steady_trace)), 5) if steady_trace else None,
            "xla/fallback_ops": _fallback_ops(),
        }


# ---------------------------------------------------------------------------------- trainer


def _prime_sgd_momentum(optimizer: torch.optim.Optimizer) -> None:
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
                st["momentum_buffer"] = _device_zeros(p)


def _unalias_scalars(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
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


def _lower_nearest_upsample(model: nn.Module) -> int:
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


def _device_zeros(like: torch.Tensor) -> torch.Tensor:
    """Zeros sent from the host: a buffer of its own.

    ``torch.zeros_like`` on the device is a traced op; equal-shaped ones can come out of one
    graph sharing a buffer, and the next step then sees aliased inputs: a different graph.
    """
    return torch.zeros(like.shape, dtype=like.dtype).to(like.device)



class _ValidationView:
    """What DetectionValidator reads from a trainer, with the EMA and the device on the host."""

    def __init__(self, trainer: "XLADetectionTrainer", cpu_model: nn.Module):
        self._trainer = trainer
        self.ema = SimpleNamespace(ema=cpu_model)
        self.model = cpu_model
        self.device = torch.device("cpu")
        self.amp = False
        self.world_size = 1  # the host validates the whole val set; no cross-process reduce
        self.loss_items = {k: torch.zeros(()) for k in trainer.loss_names}

    def __getattr__(self, name):
        return getattr(self._trainer, name)


class XLADetectionTrainer(DetectionTrainer):
    """DetectionTrainer whose training step runs on an XLA device (one process per core)."""

    def __init__(
        self,
        overrides: dict,
        *,
        world_size: int = 1,
        rank: int = 0,
        max_boxes: int = 32,
        bf16: bool = False,
        callbacks: dict[str, list[Callable]] | None = None,
    ):
        self.xla_world = int(world_size)
        self.xla_rank = int(rank)
        self.is_master = rank == 0
        self.max_boxes = int(max_boxes)
        self.bf16 = bool(bf16)
        if self.max_boxes < 1:
            raise ValueError(f"max_boxes must be >= 1, got {max_boxes}")
        requested_workers = overrides.get("workers")
        cb = ul_callbacks.get_default_callbacks()
        for event, fns in (callbacks or {}).items():
            cb[event].extend(fns)
        if self.is_master:
            super().__init__(overrides=overrides, _callbacks=cb)
        else:  # integrations (loggers) only in the master process
            add = ul_callbacks.add_integration_callbacks
            import ultralytics.engine.trainer as ul_trainer

            ul_trainer.callbacks.add_integration_callbacks = lambda *a, **k: None
            try:
                super().__init__(overrides=overrides, _callbacks=cb)
            finally:
                ul_trainer.callbacks.add_integration_callbacks = add
        # BaseTrainer forces workers=0 for device='cpu'; the XLA host still wants loader workers.
        if requested_workers is not None:
            self.args.workers = int(requested_workers)
        self.xla_device = None
        self.criterion = None
        self.cpu_ema = None
        self.host_batches = None
        self.step_log = StepLog()
        self.loss_cpu = None

    # ------------------------------------------------------------------ setup

    def _check_args(self):
        a = self.args
        if not isinstance(a.batch, int) or a.batch < 1:
            raise ValueError(f"XLA training needs an explicit integer batch >= 1 (no AutoBatch), got {a.batch!r}")
        if a.batch < self.xla_world:
            raise ValueError(f"batch={a.batch} is smaller than world_size={self.xla_world}")
        if float(getattr(a, "multi_scale", 0.0) or 0.0) > 0:
            LOGGER.warning("XLA: multi_scale changes the input shape every step (a recompile each); disabled")
            a.multi_scale = 0.0
        if a.rect:
            LOGGER.warning("XLA: rect training gives batch-dependent shapes; using rect=False")
            a.rect = False
        if a.compile:
            a.compile = False
        if getattr(a, "quantize", None):
            raise ValueError("XLA backend: quantization-aware training is not supported")
        if getattr(a, "distill_model", None):
            raise ValueError("XLA backend: knowledge distillation is not supported")
        if str(a.optimizer).lower() == "auto":
            LOGGER.warning("XLA: optimizer=auto ignores lr0/momentum (Ultralytics rule); pin the optimizer")
        a.amp = "bf16" if self.bf16 else False

    def _setup_train(self):
        import torch_xla
        import torch_xla.core.xla_model as xm

        self._check_args()
        self.xla_device = torch_xla.device()
        ckpt = self.setup_model()  # CPU: yaml, .pt weights or the resume checkpoint
        self.set_model_attributes()
        gs = max(int(self.model.stride.max() if hasattr(self.model, "stride") else 32), 32)
        self.args.imgsz = check_imgsz(self.args.imgsz, stride=gs, floor=gs, max_dim=1)
        self.stride = gs

        # Freeze layers (BaseTrainer's rules; '.dfl' always frozen)
        freeze = self.args.freeze
        freeze_list = freeze if isinstance(freeze, list) else range(freeze) if isinstance(freeze, int) else []
        self.freeze_layer_names = [f"model.{x}." for x in freeze_list] + [".dfl"]
        for k, v in self.model.named_parameters():
            if any(x in k for x in self.freeze_layer_names):
                v.requires_grad = False
            elif not v.requires_grad and v.dtype.is_floating_point:
                v.requires_grad = True
        self.amp = False
        # disabled scaler: only so BaseTrainer's resume can read checkpoints written on GPUs
        self.scaler = torch.amp.GradScaler("cuda", enabled=False)

        # Data: Ultralytics' dataset (same augmentation), fixed batches, padded targets
        self.batch_size = self.args.batch  # TOTAL over all cores, as Ultralytics
        per_core = self.batch_size // self.xla_world  # a remainder is dropped, as Ultralytics
        train_set = self.build_dataset(self.data["train"], mode="train", batch=per_core)
        self.train_loader = build_train_loader(
            train_set,
            per_core,
            self.args.workers,
            self.max_boxes,
            world_size=self.xla_world,
            rank=self.xla_rank,
            seed=self.args.seed,
        )
        self.host_batches = HostBatches(self.train_loader, self.max_boxes)
        label_max = max((len(lb["cls"]) for lb in train_set.labels), default=0)
        if self.is_master:
            LOGGER.info(
                f"XLA: {self.xla_world} process(es), per-core batch {per_core}, max_boxes={self.max_boxes} "
                f"(train labels hold up to {label_max} boxes per image; mosaic can combine 4 images)"
            )
            self.test_loader = self.get_dataloader(
                self.data[self.args.split], batch_size=per_core * 2, rank=-1, mode="val"
            )
        else:
            self.test_loader = None
        nb = len(self.train_loader)
        self.accumulate = max(round(self.args.nbs / self.batch_size), 1)
        weight_decay = self.args.weight_decay * self.batch_size * self.accumulate / self.args.nbs
        if not self.args.time:
            self.accumulate = min(self.accumulate, nb * self.epochs)
        if self.args.task in {"detect"} and self.test_loader is not None:
            DetectionValidator._check_max_det(
                self.args, {"train": train_set, "val": self.test_loader.dataset}
            )
            self.model.set_head_attr(max_det=self.args.max_det)
        self.set_class_weights()  # CPU tensor attribute; the criterion moves it

        # Host template for validation/checkpoints, then the model goes to the XLA device.
        self.cpu_ema = deepcopy(self.model).eval()
        for p in self.cpu_ema.parameters():
            p.requires_grad_(False)
        n_up = _lower_nearest_upsample(self.model)  # device copy only (cpu_ema keeps nn.Upsample)
        if n_up and self.is_master:
            LOGGER.info(f"XLA: {n_up} nearest nn.Upsample layer(s) run as expand+reshape on the device")
        self.model = self.model.to(self.xla_device)
        if self.xla_world > 1:  # UNTESTED here (multi-process XLA hangs on these CPU machines)
            xm.broadcast_master_param(self.model)

        iterations = math.ceil(len(train_set) / max(self.batch_size, self.args.nbs)) * self.epochs
        self.optimizer = self.build_optimizer(
            model=self.model,
            name=self.args.optimizer,
            lr=self.args.lr0,
            momentum=self.args.momentum,
            decay=weight_decay,
            iterations=iterations,
        )
        self._setup_scheduler()

        self.criterion = build_xla_criterion(self.model)
        crit_names = getattr(self.criterion, "loss_names", None) or self.criterion.one2one.loss_names
        self.loss_names = tuple(crit_names)
        self.validator = self.get_validator() if self.is_master else None
        self.ema = ModelEMA(self.model)
        if self.is_master:
            metric_keys = self.validator.metrics.keys + self.label_loss_items(prefix="val")
            self.metrics = dict(zip(metric_keys, [0] * len(metric_keys)))
        self.stopper, self.stop = EarlyStopping(patience=self.args.patience), False
        self.resume_training(ckpt)
        self.scheduler.last_epoch = self.start_epoch - 1
        # Gradients exist (as zeros) from the start, so the first step accumulates into them like
        # every later step: one graph less, and a resumed run's first step is the steady graph.
        for p in self.model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = _device_zeros(p)
        _prime_sgd_momentum(self.optimizer)
        _unalias_scalars(self.model, self.optimizer)
        torch_xla.sync()  # setup work (device copies, EMA clone) as its own graph, before step 0
        self.run_callbacks("on_pretrain_routine_end")

    def resume_training(self, ckpt):
        """BaseTrainer.resume_training, with the E2E loss gains restored on the XLA criterion."""
        super().resume_training(ckpt)
        model = self.model
        if getattr(model, "criterion", None) is not None:
            model.criterion = None  # BaseTrainer rebuilds a stock criterion for E2E heads; ours is separate
        if ckpt is not None and self.resume and hasattr(self.criterion, "update"):
            self.criterion.updates = self.start_epoch - 1
            self.criterion.update()

    # ------------------------------------------------------------------ step

    def optimizer_step(self):
        """All-reduce, clip to 10 (Ultralytics), step, zero, EMA: traced into the current graph.

        ``xm.optimizer_step`` is ``reduce_gradients`` + ``step``; it is split here so that
        clipping sees the all-reduced gradient, as Ultralytics' clipping sees DDP's averaged one.
        Gradients are zeroed, not set to None, so every later step traces the same graph.
        """
        import torch_xla.core.xla_model as xm

        xm.reduce_gradients(self.optimizer)  # mean over cores; no-op for one process
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=10.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=False)
        self.ema.update(self.model)

    def _forward_loss(self, batch):
        img = batch["img"].float() / 255
        with torch.autocast("xla", dtype=torch.bfloat16, enabled=self.bf16):
            preds = self.model(img)
            loss, items = self.criterion(preds, batch)
        return loss, items

    # ------------------------------------------------------------------ loop

    def train(self):
        try:
            self._do_train()
        finally:
            unset_deterministic()
            self.run_callbacks("teardown")

    def _do_train(self):
        import torch_xla
        import torch_xla.distributed.parallel_loader as pl

        self._setup_train()
        dev = self.xla_device
        nb = len(self.train_loader)
        nw = self._get_warmup_iterations(nb)
        last_opt_step = -1
        acc0 = self.accumulate
        self.epoch_time = None
        self.epoch_time_start = self.train_time_start = time.time()
        self.run_callbacks("on_train_start")
        if self.is_master:
            LOGGER.info(
                f"XLA: {len(self.train_loader.dataset)} train images, {nb} steps/epoch/core, "
                f"accumulate={self.accumulate}, bf16={self.bf16}, starting epoch {self.start_epoch + 1}/{self.epochs}"
            )
        epoch = self.start_epoch
        mosaic_closed = not self.args.close_mosaic
        self.step_log.begin()  # (gradients are already zero tensors: see _setup_train)
        device_loader = pl.MpDeviceLoader(self.host_batches, dev)
        n_items = len(self.loss_names)
        while True:
            self.epoch = epoch
            self.run_callbacks("on_train_epoch_start")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.scheduler.step()
            self._model_train()
            if self.xla_world > 1:
                self.train_loader.sampler.set_epoch(epoch)
            if not mosaic_closed and epoch >= self.epochs - self.args.close_mosaic:
                mosaic_closed = True
                self._close_dataloader_mosaic()
                self.train_loader.reset()

            # device data (a transfer, not a traced constant): the first step of each epoch
            # traces the same graph as every other step
            tsum = torch.zeros(n_items).to(dev)
            steps = 0
            for i, batch in enumerate(device_loader):
                self.step_log.start()
                self.run_callbacks("on_train_batch_start")
                ni = i + nb * epoch
                if nw and ni <= nw:  # Ultralytics warmup, host-side floats only
                    xi = [0, nw]
                    self.accumulate = max(1, int(np.interp(ni, xi, [1, acc0]).round()))
                    for x in self.optimizer.param_groups:
                        x["lr"] = float(
                            np.interp(
                                ni,
                                xi,
                                [
                                    self.args.warmup_bias_lr if x.get("param_group") == "bias" else 0.0,
                                    x["initial_lr"] * self.lf(epoch),
                                ],
                            )
                        )
                        if "momentum" in x:
                            x["momentum"] = float(np.interp(ni, xi, [self.args.warmup_momentum, self.args.momentum]))

                loss, items = self._forward_loss(batch)
                self.loss = loss.sum()
                if self.xla_world > 1:
                    self.loss = self.loss * self.xla_world  # as Ultralytics under DDP (cores average)
                self.loss.backward()
                tsum = tsum + torch.stack([items[k] for k in self.loss_names]).float()
                steps += 1

                if ni - last_opt_step >= self.accumulate:
                    self.optimizer_step()
                    last_opt_step = ni
                    if self.args.time and self.xla_world == 1:
                        self.stop = (time.time() - self.train_time_start) > (self.args.time * 3600)
                        if self.stop:
                            break

                self.run_callbacks("on_train_batch_end")
                self.step_log.traced()
                # Mid-epoch stops only with one process: cores leaving the epoch at different
                # steps would deadlock in the gradient all-reduce. With several cores a stop is
                # agreed at the epoch end (_agree_stop).
                if self.stop and self.xla_world == 1:
                    break
            self.step_log.end_epoch()
            torch_xla.sync()

            if steps:
                tsum_cpu, loss_cpu = to_cpu([tsum, self.loss.detach()])
                self.tloss = {k: v for k, v in zip(self.loss_names, tsum_cpu / steps)}
                self.loss_items = dict(self.tloss)
                self.loss_cpu = loss_cpu
                if not torch.isfinite(tsum_cpu).all():
                    LOGGER.warning(f"XLA: non-finite training loss in epoch {epoch + 1}")
            if hasattr(self.criterion, "update"):
                self.criterion.update()
            self.lr = {f"lr/pg{ir}": x["lr"] for ir, x in enumerate(self.optimizer.param_groups)}
            self.run_callbacks("on_train_epoch_end")

            final_epoch = epoch + 1 >= self.epochs
            if self.is_master:
                self.ema.update_attr(self.model, include=_EMA_ATTRS)
                self._refresh_cpu_ema()
                if self.args.val or final_epoch or self.stopper.possible_stop or self.stop:
                    self.metrics, self.fitness = self.validate()
                self.save_metrics(metrics={**self.label_loss_items(self.tloss), **self.metrics, **self.lr})
                self.stop |= self.stopper(epoch + 1, self.fitness) or final_epoch
                if self.args.time:
                    self.stop |= (time.time() - self.train_time_start) > (self.args.time * 3600)
                if (self.args.save or final_epoch) and self.save_model():
                    self.run_callbacks("on_model_save")

            t = time.time()
            self.epoch_time = t - self.epoch_time_start
            self.epoch_time_start = t
            if self.args.time:
                mean_epoch_time = (t - self.train_time_start) / (epoch - self.start_epoch + 1)
                self.epochs = self.args.epochs = math.ceil(self.args.time * 3600 / mean_epoch_time)
                nw = self._get_warmup_iterations(nb)
                self._setup_scheduler()
                self.scheduler.last_epoch = self.epoch
                self.stop |= epoch >= self.epochs
            if self.is_master:
                self.run_callbacks("on_fit_epoch_end")
            self.stop = self._agree_stop(self.stop)
            if self.stop:
                break
            epoch += 1

        if self.is_master:
            LOGGER.info(
                f"\n{epoch - self.start_epoch + 1} epochs completed in {(time.time() - self.train_time_start) / 3600:.3f} hours."
            )
            self.final_eval()
            if self.args.plots:
                self.plot_metrics()
            self.run_callbacks("on_train_end")
        self.train_loader.close()

    def _agree_stop(self, stop: bool) -> bool:
        """All cores stop together (the master decides: callbacks and validation run there)."""
        if self.xla_world <= 1:
            return bool(stop)
        import torch_xla.core.xla_model as xm  # UNTESTED here (multi-process)

        flag = torch.tensor([1.0 if (stop and self.is_master) else 0.0]).to(self.xla_device)
        flag = xm.all_reduce(xm.REDUCE_SUM, flag)
        return bool(flag.cpu().item() > 0)

    # ------------------------------------------------------------------ host side

    def _refresh_cpu_ema(self):
        """Copy the (device) EMA weights into the host model used for validation and checkpoints."""
        import torch_xla

        torch_xla.sync()
        self.cpu_ema.load_state_dict(to_cpu(self.ema.ema.state_dict()))
        copy_attr(self.cpu_ema, self.model, include=[a for a in _EMA_ATTRS if a not in ("stride", "class_weights")])
        cw = getattr(self.model, "class_weights", None)
        if cw is not None:
            self.cpu_ema.class_weights = cw.detach().cpu()
        self.cpu_ema.criterion = None  # rebuilt on the host by the validator for val losses
        return self.cpu_ema

    def validate(self):
        """BaseTrainer.validate on the host: DetectionValidator in training mode on the EMA copy."""
        metrics = self.validator(_ValidationView(self, self.cpu_ema))
        if metrics is None:
            return None, None
        fallback = -float(self.loss_cpu) if self.loss_cpu is not None else 0.0
        fitness = metrics.pop("fitness", fallback)
        if self.best_fitness is None or self.best_fitness < fitness:
            self.best_fitness = fitness
        return metrics, fitness

    def save_model(self):
        """BaseTrainer.save_model's checkpoint, built from host copies (see checkpoint.py)."""
        data = build_checkpoint(
            epoch=self.epoch,
            best_fitness=self.best_fitness,
            stopper=self.stopper,
            ema_cpu=self.cpu_ema,
            updates=self.ema.updates,
            optimizer_state=optimizer_state_to_cpu(self.optimizer),
            train_args=vars(self.args),
            train_metrics={**self.metrics, "fitness": self.fitness},
            train_results=self.read_results_csv(),
            extra={
                "world_size": self.xla_world,
                "max_boxes": self.max_boxes,
                "bf16": self.bf16,
                "compile_count": _compile_count(),
            },
        )
        write_checkpoints(
            data, self.wdir, is_best=self.best_fitness == self.fitness, epoch=self.epoch, save_period=self.save_period
        )
        return True

    def final_eval(self):
        """BaseTrainer.final_eval: strip the checkpoints, validate best.pt (keeps its fitness)."""
        ckpt = strip_optimizer(self.last) if self.last.exists() else {}
        self.final_fitness = None
        if self.best.exists():
            strip_optimizer(self.best, updates={"train_results": ckpt.get("train_results")})
            LOGGER.info(f"\nValidating {self.best}...")
            self.validator.args.plots = self.args.plots
            self.validator.args.compile = False
            metrics = self.validator(model=self.best)
            self.final_fitness = metrics.pop("fitness", None)
            self.metrics = metrics
            self.epoch += 1  # log best metrics at step epochs+1, as Ultralytics
            self.run_callbacks("on_fit_epoch_end")
            self.epoch -= 1

    def result(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: float(v) for k, v in (self.metrics or {}).items()}
        fitness = getattr(self, "final_fitness", None)
        out["fitness"] = float(fitness if fitness is not None else (self.fitness or 0.0))
        out["best_fitness"] = None if self.best_fitness is None else float(self.best_fitness)
        out["epochs_completed"] = int(self.epoch + 1)
        out["save_dir"] = str(self.save_dir)
        out["xla/world_size"] = self.xla_world
        out["xla/max_boxes"] = self.max_boxes
        out["xla/max_boxes_seen"] = self.host_batches.max_seen if self.host_batches else 0
        out["xla/truncated_images"] = self.host_batches.truncated_images if self.host_batches else 0
        out["xla/batch_boxes"] = list(self.host_batches.batch_boxes) if self.host_batches else []
        out["xla/bf16"] = self.bf16
        out.update(self.step_log.summary())
        return out


# ---------------------------------------------------------------------------------- entry


def _overrides(args: dict, run_dir: Path, resume: bool) -> dict:
    o = dict(args)
    for k in ("device", "project", "name", "save_dir", "exist_ok", "resume", "mode"):
        o.pop(k, None)
    o.update(device="cpu", save_dir=str(run_dir), exist_ok=True, mode="train", task="detect")
    if resume:
        last = run_dir / "weights" / "last.pt"
        if not last.exists():
            raise FileNotFoundError(f"resume=True but {last} does not exist")
        o["resume"] = str(last)
    return o


def _run_process(index: int, payload: dict) -> dict | None:
    """Body of one training process (index = core ordinal)."""
    import torch_xla.runtime as xr

    world, rank = payload["world_size"], index
    if world > 1:
        world, rank = xr.world_size(), xr.global_ordinal()
    run_dir = Path(payload["run_dir"])
    trainer = XLADetectionTrainer(
        _overrides(payload["args"], run_dir, payload["resume"]),
        world_size=world,
        rank=rank,
        max_boxes=payload["max_boxes"],
        bf16=payload["bf16"],
        callbacks=payload.get("callbacks"),
    )
    trainer.train()
    if rank != 0:
        return None
    result = trainer.result()
    (run_dir / RESULT_FILE).write_text(json.dumps(result, indent=2, default=str))
    return result


def _mp_entry(index: int, payload: dict) -> None:  # pragma: no cover - multi-process, untested here
    _run_process(index, payload)


def train_xla(
    args: dict,
    run_dir: Path,
    *,
    world_size: int = 1,
    max_boxes: int = 32,
    bf16: bool = False,
    callbacks: dict[str, list] | None = None,
    resume: bool = False,
) -> dict:
    """Train an Ultralytics detection model on XLA devices; return the final metrics dict.

    Args:
        args: Ultralytics train arguments (model, data, epochs, imgsz, batch = TOTAL over all cores,
            nbs, lr0, lrf, momentum, weight_decay, warmup_*, optimizer, cos_lr, seed, box, cls,
            dfl, augmentation keys, workers, ...). ``device``/``project``/``name`` are ignored.
        run_dir: the run folder: results.csv, args.yaml, weights/{last,best}.pt, xla_result.json.
        world_size: processes (cores). 1 runs in this process; >1 uses ``torch_xla.launch`` on all
            local devices (the TPU cores) - untested on these CPU machines.
        max_boxes: boxes kept per image (fixed padding); images with more keep the first N.
        bf16: bf16 autocast for forward and loss.
        callbacks: {event: [fn(trainer)]}, Ultralytics events; ``on_fit_epoch_end`` sees
            ``.epoch``, ``.metrics``, ``.fitness`` and may set ``.stop = True``. With
            ``world_size > 1`` they must be picklable (they run in the master process).
        resume: continue ``run_dir/weights/last.pt`` at its epoch + 1 (optimizer, EMA restored).

    Returns:
        The metrics of the final validation of best.pt (metrics/precision(B), metrics/recall(B),
        metrics/mAP50(B), metrics/mAP50-95(B)), ``fitness``, and ``xla/*`` compile statistics.
    """
    configure_xla_env()
    ok, why = xla_available()
    if not ok:
        raise RuntimeError(why)
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "args": dict(args),
        "run_dir": str(run_dir),
        "world_size": int(world_size),
        "max_boxes": int(max_boxes),
        "bf16": bool(bf16),
        "callbacks": callbacks,
        "resume": bool(resume),
    }
    if world_size <= 1:
        return _run_process(0, payload)
    # UNTESTED here: multi-process XLA on CPU hangs on these machines. One process per local
    # device (all TPU cores); the master writes the result file that is returned.
    import torch_xla

    (run_dir / RESULT_FILE).unlink(missing_ok=True)
    torch_xla.launch(_mp_entry, args=(payload,))
    return json.loads((run_dir / RESULT_FILE).read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m orchestrator.worker.xla.trainer", description="Train an Ultralytics detector on XLA (TPU)."
    )
    p.add_argument("--args-json", required=True, type=Path, help="JSON file with the Ultralytics train args")
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--world-size", type=int, default=1, help="processes (cores); 1 = this process")
    p.add_argument("--max-boxes", type=int, default=32)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--resume", action="store_true")
    ns = p.parse_args(argv)
    args = json.loads(ns.args_json.read_text())
    result = train_xla(
        args, ns.run_dir, world_size=ns.world_size, max_boxes=ns.max_boxes, bf16=ns.bf16, resume=ns.resume
    )
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
