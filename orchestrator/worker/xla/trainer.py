"""``XLADetectionTrainer``: Ultralytics' ``DetectionTrainer`` with its training step on an XLA device.

It replaces only ``_setup_train``, ``_do_train``, ``optimizer_step`` and checkpoint writing, and
reuses the rest of Ultralytics unchanged (the package docstring lists what and why). The step:
the padded batch goes through ``MpDeviceLoader``; forward, ``XLADetectionLoss``, backward, and on
optimizer steps all-reduce, ``clip_grad_norm_(10)``, ``optimizer.step()``, EMA update; warmup,
accumulation to ``nbs`` and weight decay are Ultralytics' formulas with ``batch`` the TOTAL batch.
"""

from __future__ import annotations

import math
import time
import warnings
from copy import deepcopy
from types import SimpleNamespace
from typing import Callable

import numpy as np
import torch
from ultralytics.models.yolo.detect import DetectionTrainer
from ultralytics.models.yolo.detect.val import DetectionValidator
from ultralytics.utils import LOGGER
from ultralytics.utils import callbacks as ul_callbacks
from ultralytics.utils.checks import check_imgsz
from ultralytics.utils.torch_utils import EarlyStopping, ModelEMA, strip_optimizer, unset_deterministic

from .checkpoint import refresh_host_copy, save_trainer_checkpoint, to_cpu
from .data import HostBatches, build_train_loader
from .graph import device_zeros, lower_nearest_upsample, prime_sgd_momentum, unalias_scalars
from .loss import build_xla_criterion
from .metrics import StepLog, compile_count

# Attributes the EMA copies from the model at epoch end (as BaseTrainer).
EMA_ATTRS = ["yaml", "nc", "args", "names", "stride", "class_weights"]


class _ValidationView:
    """What DetectionValidator reads from a trainer, with the EMA and the device on the host."""

    def __init__(self, trainer: "XLADetectionTrainer", cpu_model: torch.nn.Module):
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
    """DetectionTrainer whose training step runs on XLA devices: one process; on several devices
    (TPU cores, virtual XLA:CPU devices) with torch_xla's SPMD: the global batch is sharded along its
    batch dimension over a mesh of the devices, parameters and optimizer state are replicated, and
    the compiler inserts the gradient reduction. The step is then the same computation as one
    device with the whole batch (BatchNorm sees the global batch)."""

    def __init__(self, overrides: dict, *, world_size: int = 1, max_boxes: int = 32,
                 bf16: bool = False, callbacks: dict[str, list[Callable]] | None = None):
        self.xla_world = int(world_size)  # devices of the SPMD mesh
        self.mesh = None
        self.max_boxes = int(max_boxes)
        self.bf16 = bool(bf16)
        if self.max_boxes < 1:
            raise ValueError(f"max_boxes must be >= 1, got {max_boxes}")
        requested_workers = overrides.get("workers")
        cb = ul_callbacks.get_default_callbacks()
        for event, fns in (callbacks or {}).items():
            cb[event].extend(fns)
        super().__init__(overrides=overrides, _callbacks=cb)
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
            raise ValueError(f"batch={a.batch} is smaller than the {self.xla_world} XLA devices")
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

        self._check_args()
        self.xla_device = torch_xla.device()
        ckpt = self.setup_model()  # CPU: yaml, .pt weights or the resume checkpoint
        self.set_model_attributes()
        gs = max(int(self.model.stride.max() if hasattr(self.model, "stride") else 32), 32)
        self.args.imgsz = check_imgsz(self.args.imgsz, stride=gs, floor=gs, max_dim=1)
        self.stride = gs
        self._freeze_layers()
        self.amp = False
        # disabled scaler: only so BaseTrainer's resume can read checkpoints written on GPUs
        self.scaler = torch.amp.GradScaler("cuda", enabled=False)
        train_set = self._setup_data()
        self._move_model_to_device()
        self._setup_optimizer(len(train_set))
        self.criterion = build_xla_criterion(self.model)
        crit_names = getattr(self.criterion, "loss_names", None) or self.criterion.one2one.loss_names
        self.loss_names = tuple(crit_names)
        self.validator = self.get_validator()
        self.ema = ModelEMA(self.model)
        metric_keys = self.validator.metrics.keys + self.label_loss_items(prefix="val")
        self.metrics = dict(zip(metric_keys, [0] * len(metric_keys)))
        self.stopper, self.stop = EarlyStopping(patience=self.args.patience), False
        self.resume_training(ckpt)
        self.scheduler.last_epoch = self.start_epoch - 1
        # Gradients exist (as zeros) from the start, so the first step accumulates into them like
        # every later step: one graph less, and a resumed run's first step is the steady graph.
        for p in self.model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = device_zeros(p)
        prime_sgd_momentum(self.optimizer)
        unalias_scalars(self.model, self.optimizer)
        self._replicate_state()
        torch_xla.sync()  # setup work (device copies, EMA clone) as its own graph, before step 0
        self.run_callbacks("on_pretrain_routine_end")

    def _freeze_layers(self):
        """BaseTrainer's rules; '.dfl' always frozen."""
        freeze = self.args.freeze
        freeze_list = freeze if isinstance(freeze, list) else range(freeze) if isinstance(freeze, int) else []
        self.freeze_layer_names = [f"model.{x}." for x in freeze_list] + [".dfl"]
        for k, v in self.model.named_parameters():
            if any(x in k for x in self.freeze_layer_names):
                v.requires_grad = False
            elif not v.requires_grad and v.dtype.is_floating_point:
                v.requires_grad = True

    def _setup_data(self):
        """Ultralytics' dataset (same augmentation), fixed batches, padded targets; the accumulation."""
        self.batch_size = self.args.batch  # TOTAL over all devices, as Ultralytics
        per_core = self.batch_size // self.xla_world  # a remainder is dropped, as Ultralytics
        train_set = self.build_dataset(self.data["train"], mode="train", batch=per_core)
        # one loader of global batches (per-device batch x devices), sharded over the mesh on the way in
        self.train_loader = build_train_loader(train_set, per_core * self.xla_world, self.args.workers,
                                               self.max_boxes, seed=self.args.seed)
        self.host_batches = HostBatches(self.train_loader, self.max_boxes)
        label_max = max((len(lb["cls"]) for lb in train_set.labels), default=0)
        LOGGER.info(
            f"XLA: {self.xla_world} device(s)" + (" (SPMD)" if self.xla_world > 1 else "")
            + f", per-device batch {per_core}, max_boxes={self.max_boxes} "
            f"(train labels hold up to {label_max} boxes per image; mosaic can combine 4 images)"
        )
        self.test_loader = self.get_dataloader(self.data[self.args.split], batch_size=per_core * 2, rank=-1,
                                               mode="val")
        self.accumulate = max(round(self.args.nbs / self.batch_size), 1)
        self.weight_decay = self.args.weight_decay * self.batch_size * self.accumulate / self.args.nbs
        if not self.args.time:
            self.accumulate = min(self.accumulate, len(self.train_loader) * self.epochs)
        if self.args.task in {"detect"} and self.test_loader is not None:
            DetectionValidator._check_max_det(self.args, {"train": train_set, "val": self.test_loader.dataset})
            self.model.set_head_attr(max_det=self.args.max_det)
        self.set_class_weights()  # CPU tensor attribute; the criterion moves it
        return train_set

    def _move_model_to_device(self):
        """Keep a host template for validation and checkpoints, then move the model to the XLA device."""
        self.cpu_ema = deepcopy(self.model).eval()
        for p in self.cpu_ema.parameters():
            p.requires_grad_(False)
        n_up = lower_nearest_upsample(self.model)  # device copy only (cpu_ema keeps nn.Upsample)
        if n_up:
            LOGGER.info(f"XLA: {n_up} nearest nn.Upsample layer(s) run as expand+reshape on the device")
        self.model = self.model.to(self.xla_device)  # replicated over the mesh (no sharding annotation)
        if self.xla_world > 1:
            import torch_xla.distributed.spmd as xs

            self.mesh = xs.Mesh(np.arange(self.xla_world), (self.xla_world,), ("data",))

    def _replicate_state(self):
        """SPMD: mark the weights, gradients, buffers, optimizer state and EMA replicated before step
        0, so the step's inputs carry the same sharding at every step (else step 1 sees the shardings
        step 0 produced and compiles a second graph)."""
        if self.mesh is None:
            return
        import torch_xla.distributed.spmd as xs

        tensors = [*self.model.parameters(), *self.model.buffers(), *self.ema.ema.state_dict().values()]
        tensors += [p.grad for p in self.model.parameters() if p.grad is not None]
        tensors += [v for state in self.optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device.type == "xla":
                xs.mark_sharding(t, self.mesh, (None,) * t.dim())

    def _shard(self, batch: dict) -> dict:
        """Split every tensor of the global batch along its batch dimension over the mesh."""
        if self.mesh is not None:
            import torch_xla.distributed.spmd as xs

            for t in batch.values():
                if isinstance(t, torch.Tensor) and t.dim() > 0:
                    xs.mark_sharding(t, self.mesh, ("data",) + (None,) * (t.dim() - 1))
        return batch

    def _setup_optimizer(self, train_images: int):
        iterations = math.ceil(train_images / max(self.batch_size, self.args.nbs)) * self.epochs
        self.optimizer = self.build_optimizer(model=self.model, name=self.args.optimizer, lr=self.args.lr0,
                                              momentum=self.args.momentum, decay=self.weight_decay,
                                              iterations=iterations)
        self._setup_scheduler()

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
        """Clip to 10 (Ultralytics), step, zero, EMA: traced into the current graph. Under SPMD the
        gradients are already the global batch's (the compiler reduced them), so clipping sees what
        Ultralytics' clipping sees under DDP. Gradients are zeroed, not set to None, so every later
        step traces the same graph."""
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
        import torch_xla.distributed.parallel_loader as pl

        self._setup_train()
        nb = len(self.train_loader)
        self.nw = self._get_warmup_iterations(nb)
        self.last_opt_step = -1
        self.acc0 = self.accumulate
        self.epoch_time = None
        self.epoch_time_start = self.train_time_start = time.time()
        self.run_callbacks("on_train_start")
        LOGGER.info(
            f"XLA: {len(self.train_loader.dataset)} train images, {nb} steps/epoch, "
            f"accumulate={self.accumulate}, bf16={self.bf16}, starting epoch {self.start_epoch + 1}/{self.epochs}"
        )
        epoch = self.start_epoch
        self.mosaic_closed = not self.args.close_mosaic
        self.step_log.begin()  # (gradients are already zero tensors: see _setup_train)
        device_loader = pl.MpDeviceLoader(self.host_batches, self.xla_device)
        while True:
            self.epoch = epoch
            self._start_epoch(epoch)
            self._train_epoch(device_loader, epoch, nb)
            self._end_epoch(epoch, nb)
            if self.stop:
                break
            epoch += 1
        LOGGER.info(
            f"\n{epoch - self.start_epoch + 1} epochs completed in {(time.time() - self.train_time_start) / 3600:.3f} hours."
        )
        self.final_eval()
        if self.args.plots:
            self.plot_metrics()
        self.run_callbacks("on_train_end")
        self.train_loader.close()

    def _start_epoch(self, epoch: int):
        self.run_callbacks("on_train_epoch_start")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.scheduler.step()
        self._model_train()
        if not self.mosaic_closed and epoch >= self.epochs - self.args.close_mosaic:
            self.mosaic_closed = True
            self._close_dataloader_mosaic()
            self.train_loader.reset()

    def _warmup(self, ni: int, epoch: int):
        """Ultralytics' warmup of accumulate, lr and momentum: host-side floats only."""
        xi = [0, self.nw]
        self.accumulate = max(1, int(np.interp(ni, xi, [1, self.acc0]).round()))
        for x in self.optimizer.param_groups:
            start = self.args.warmup_bias_lr if x.get("param_group") == "bias" else 0.0
            x["lr"] = float(np.interp(ni, xi, [start, x["initial_lr"] * self.lf(epoch)]))
            if "momentum" in x:
                x["momentum"] = float(np.interp(ni, xi, [self.args.warmup_momentum, self.args.momentum]))

    def _train_epoch(self, device_loader, epoch: int, nb: int):
        import torch_xla

        # device data (a transfer, not a traced constant): the first step of each epoch
        # traces the same graph as every other step
        tsum = torch.zeros(len(self.loss_names)).to(self.xla_device)
        steps = 0
        for i, batch in enumerate(device_loader):
            batch = self._shard(batch)
            self.step_log.start()
            self.run_callbacks("on_train_batch_start")
            ni = i + nb * epoch
            if self.nw and ni <= self.nw:
                self._warmup(ni, epoch)
            loss, items = self._forward_loss(batch)
            # the loss of the whole global batch: what Ultralytics' DDP gets from loss x world size
            # with the ranks' gradients averaged
            self.loss = loss.sum()
            self.loss.backward()
            tsum = tsum + torch.stack([items[k] for k in self.loss_names]).float()
            steps += 1
            if ni - self.last_opt_step >= self.accumulate:
                self.optimizer_step()
                self.last_opt_step = ni
                if self.args.time:
                    self.stop = (time.time() - self.train_time_start) > (self.args.time * 3600)
                    if self.stop:
                        break
            self.run_callbacks("on_train_batch_end")
            self.step_log.traced()
            if self.stop:
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

    def _end_epoch(self, epoch: int, nb: int):
        """BaseTrainer's epoch end: criterion and lr bookkeeping, validation and checkpoints, the time
        budget."""
        if hasattr(self.criterion, "update"):
            self.criterion.update()
        self.lr = {f"lr/pg{ir}": x["lr"] for ir, x in enumerate(self.optimizer.param_groups)}
        self.run_callbacks("on_train_epoch_end")
        final_epoch = epoch + 1 >= self.epochs
        self.ema.update_attr(self.model, include=EMA_ATTRS)
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
            self.nw = self._get_warmup_iterations(nb)
            self._setup_scheduler()
            self.scheduler.last_epoch = self.epoch
            self.stop |= epoch >= self.epochs
        self.run_callbacks("on_fit_epoch_end")

    # ------------------------------------------------------------------ host side

    def _refresh_cpu_ema(self):
        """Copy the (device) EMA weights into the host model used for validation and checkpoints."""
        return refresh_host_copy(self.cpu_ema, self.ema.ema, self.model, EMA_ATTRS)

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
        save_trainer_checkpoint(self, extra={"world_size": self.xla_world, "max_boxes": self.max_boxes,
                                             "bf16": self.bf16, "compile_count": compile_count()})
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
