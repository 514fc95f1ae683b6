"""The exact formulas Ultralytics applies to batch, nbs, weight decay, lr and warmup.

Pure python (no torch, no ultralytics import). Each function mirrors one place in the
Ultralytics source, read in 8.4.190 (``ultralytics/engine/trainer.py`` and
``ultralytics/data/build.py``); the function named in each docstring is the one copied.
``tests/e2e/test_scaler_vs_ultralytics.py`` builds real trainers and checks these against them.

Notation: ``batch`` is Ultralytics' ``batch`` argument, the TOTAL over all devices.
"""

from __future__ import annotations

import math

# BaseTrainer.build_optimizer: `optimizers = {...}` and the case-insensitive name lookup.
OPTIMIZERS = ("SGD", "MuSGD", "RMSprop", "Adam", "Adamax", "AdamW", "NAdam", "RAdam")
# The detection loss is a SUM over the images of a step (v8DetectionLoss.loss returns `loss * batch_size`,
# _do_train multiplies by world_size under DDP, accumulation adds batches), so the gradient grows with the
# images per optimizer step X. SGD-family updates are proportional to the gradient (MuSGD: its SGD branch;
# its Muon branch is orthogonalised, scale-free); Adam-family updates, RMSprop's too, divide by a running
# root mean square of the gradient and do not change when the gradient is multiplied by a constant.
SGD_FAMILY = frozenset({"SGD", "MuSGD"})
ADAM_FAMILY = frozenset({"Adam", "Adamax", "AdamW", "NAdam", "RAdam", "RMSprop"})
# Weight decay added to the gradient (torch's coupled L2), not to the weights (AdamW's decoupled decay).
COUPLED_L2 = frozenset({"SGD", "MuSGD", "Adam", "Adamax", "NAdam", "RAdam", "RMSprop"})

# ultralytics/cfg/default.yaml: the stock values of what the scaler reads (the job spec's reference and
# the scaler's inputs default to them; tests/unit/test_spec.py checks them against the installed package).
DEFAULTS = {"batch": 16, "nbs": 64, "epochs": 100, "optimizer": "auto", "lr0": 0.01, "lrf": 0.01, "momentum": 0.937,
            "weight_decay": 0.0005, "warmup_epochs": 3.0, "warmup_momentum": 0.8, "warmup_bias_lr": 0.1}

# ultralytics/cfg/__init__.py CFG_FRACTION_KEYS: check_cfg rejects values outside [0.0, 1.0].
FRACTION_KEYS = frozenset({"lr0", "lrf", "momentum", "weight_decay", "warmup_momentum", "warmup_bias_lr"})

# engine/trainer.py optimizer_step: clip_grad_norm_(model.parameters(), max_norm=10.0) before every step.
CLIP_MAX_NORM = 10.0

# utils/torch_utils.py ModelEMA: decay = 0.9999 * (1 - exp(-updates / tau)), one update per optimizer step.
EMA_TAU = 2000

# build_optimizer: `iterations > 10000` picks MuSGD, else AdamW with the lr fit (8.4.8 and later;
# earlier releases pick other pairs: scaling/releases.py).
AUTO_ITERATIONS_THRESHOLD = 10000
AUTO_PICKS = ("MuSGD", "AdamW")


def canonical_optimizer(name: str) -> str | None:
    """Ultralytics' spelling of an optimizer name, or None if it is not one.

    BaseTrainer.build_optimizer: ``name = {x.lower(): x for x in optimizers}.get(str(name).lower(), ...)``,
    so 'sgd', 'adamw', 'RMSProp' (the spelling in default.yaml) all work. 'auto' maps to 'auto'.
    """
    table = {x.lower(): x for x in (*OPTIMIZERS, "auto")}
    return table.get(str(name).strip().lower())


def batch_per_device(batch: int, world_size: int) -> int:
    """BaseTrainer._build_train_pipeline: ``batch_size = self.batch_size // max(self.world_size, 1)``.

    A remainder is dropped silently by Ultralytics.
    """
    return batch // max(world_size, 1)


def accumulate(nbs: int, batch: int) -> int:
    """BaseTrainer._build_train_pipeline: ``max(round(self.args.nbs / self.batch_size), 1)``.

    From the TOTAL batch. Python's round() rounds halves to even: nbs 64, batch 128 -> round(0.5) = 0 -> 1;
    nbs 96, batch 64 -> round(1.5) = 2; nbs 160, batch 64 -> round(2.5) = 2.
    """
    return max(round(nbs / batch), 1)


def optimizer_weight_decay(weight_decay: float, batch: int, nbs: int) -> float:
    """BaseTrainer._build_train_pipeline: ``weight_decay * batch_size * accumulate / nbs``.

    The value handed to build_optimizer (``decay=``) and put on the 'weight' (and MuSGD 'muon') param
    groups. Uses the accumulate BEFORE the ``len(train_loader) * epochs`` cap below.
    """
    return weight_decay * batch * accumulate(nbs, batch) / nbs


def samples_per_device(dataset_size: int, world_size: int) -> int:
    """Images one rank sees per epoch.

    build_dataloader: rank -1 (one process) has no sampler and sees all N; under DDP each rank gets a
    torch DistributedSampler (drop_last=False), whose len is ceil(N / world_size) (it pads by repeating).
    """
    if world_size <= 1:
        return dataset_size
    return math.ceil(dataset_size / world_size)


def batches_per_epoch(dataset_size: int, batch_per_dev: int, world_size: int, drop_last: bool = False) -> int:
    """``len(train_loader)`` on each rank: build_dataloader + InfiniteDataLoader.__len__.

    build_dataloader: ``batch = min(batch, len(dataset))``; ``samples = len(sampler) or len(dataset)``;
    ``drop_last = drop_last and samples > batch > 0 and samples % batch != 0``; the loader's length is
    ``samples // batch`` if drop_last else ``ceil(samples / batch)``. DetectionTrainer.get_dataloader passes
    ``drop_last=self.args.compile and mode == 'train'``: only with compile=True.
    """
    if dataset_size <= 0:
        return 0
    b = min(batch_per_dev, dataset_size)
    samples = samples_per_device(dataset_size, world_size)
    drop = drop_last and samples > b > 0 and samples % b != 0
    return samples // b if drop else math.ceil(samples / b)


def images_per_batch(dataset_size: int, batch_per_dev: int, world_size: int) -> int:
    """Images in one full batch on one rank: build_dataloader caps the loader's batch at len(dataset),
    and a rank's sampler may hold fewer samples than that (DDP on a small dataset: N = 40 on 4 ranks of
    16 gives batches of 10)."""
    return min(batch_per_dev, dataset_size, samples_per_device(dataset_size, world_size))


def xla_samples_per_device(dataset_size: int, world_size: int) -> int:
    """The samples each XLA device trains on per epoch: its shard of the global batches (SPMD)."""
    return dataset_size // max(world_size, 1)


def xla_batches_per_epoch(dataset_size: int, batch_per_dev: int, world_size: int) -> int:
    """orchestrator/worker/xla/data.py: global batches of batch_per_dev x devices, the short last one
    dropped (it would be a new graph): floor(D / (b W)) = floor(floor(D / W) / b)."""
    return xla_samples_per_device(dataset_size, world_size) // batch_per_dev if batch_per_dev > 0 else 0


def capped_accumulate(acc: int, nb: int, epochs: int, capped: bool = True) -> int:
    """BaseTrainer._build_train_pipeline: ``min(self.accumulate, len(self.train_loader) * self.epochs)``
    (skipped in `time=` mode; `capped`: the release has it, 8.4.177 on). Only binds for tiny datasets."""
    return min(acc, nb * epochs) if capped else acc


def warmup_iterations(warmup_epochs: float, epochs: int, nb: int, floor: int = 0, capped: bool = True) -> int:
    """BaseTrainer._get_warmup_iterations (called by _do_train with ``nb = len(self.train_loader)``).

    ``warmup_epochs = min(args.warmup_epochs, max(epochs - 1, 0))``;
    ``round(warmup_epochs * nb) if warmup_epochs > 0 else 0``. Releases before 8.4.103 (`floor` 100,
    `capped` False): ``max(round(args.warmup_epochs * nb), 100) if args.warmup_epochs > 0 else -1``
    (-1: no warmup, given as 0 here).
    """
    we = warmup_epochs_applied(warmup_epochs, epochs, capped)
    return max(round(we * nb), floor) if we > 0 else 0


def accumulate_after_warmup(nbs: int, batch: int, capped_acc: int, nw: int, total_steps: int,
                            last_step: bool = True, ramp_to_capped: bool = True) -> int:
    """The accumulate a run trains with once warmup ends (or at its last step, if warmup outlasts it).

    _do_train ramps ``self.accumulate = max(1, int(np.interp(ni, [0, nw], [1, target]).round()))`` on the
    warmup steps and leaves it there: from 8.4.183 ``if nw and ni <= nw`` with target = the capped
    accumulate (it lands on it); 8.4.103-8.4.182 ``if ni < nw`` with target nbs / batch (it stops one step
    short: nw = 2 ends at 8 of 16); before, ``if ni <= nw`` with nw at least 100, which a short run never
    reaches. Without warmup the accumulate stays as set up (`capped_acc`)."""
    if nw <= 0 or total_steps <= 0:
        return capped_acc
    target = capped_acc if ramp_to_capped else nbs / batch
    return warmup_accumulate(min(nw if last_step else nw - 1, total_steps - 1), nw, target)


# optimizers whose param groups have a "momentum" key, which _do_train's warmup ramps (Adam-family groups
# have betas: build_optimizer sets beta1 = momentum once)
MOMENTUM_RAMPED = frozenset({"SGD", "MuSGD", "RMSprop"})


def momentum_after_warmup(momentum: float, warmup_momentum: float, nw: int, total_steps: int,
                          last_step: bool = True) -> float:
    """The momentum an SGD-family optimizer keeps for the rest of the run once warmup ends.

    _do_train sets ``x["momentum"] = np.interp(ni, [0, nw], [warmup_momentum, momentum])`` on the warmup
    steps and never again: it lands on `momentum` only if step nw itself runs (``ni <= nw``; not in
    8.4.103-8.4.182, ``ni < nw``) and the run is long enough; otherwise momentum stays where the ramp
    stopped (nw = 2: halfway, 0.8685 for 0.8 -> 0.937). Without warmup it is `momentum`."""
    if nw <= 0 or total_steps <= 0:
        return momentum
    last = min(nw if last_step else nw - 1, total_steps - 1)
    if last >= nw:  # np.interp returns the end point itself there
        return momentum
    return (momentum - warmup_momentum) / nw * last + warmup_momentum  # np.interp's own arithmetic


def warmup_accumulate(ni: int, nw: int, target: float) -> int:
    """_do_train's accumulate at warmup step `ni` of `nw`:
    ``max(1, int(np.interp(ni, [0, nw], [1, target]).round()))`` (numpy rounds halves to even, as round())."""
    return max(1, int(round(1 + (target - 1) * ni / nw)))


def warmup_epochs_applied(warmup_epochs: float, epochs: int, capped: bool = True) -> float:
    """The warmup length in epochs that _get_warmup_iterations really uses (capped at epochs - 1 from
    8.4.103 on)."""
    return max(min(warmup_epochs, max(epochs - 1, 0)) if capped else warmup_epochs, 0)


def auto_iterations(dataset_size: int, batch: int, nbs: int, epochs: int) -> int:
    """BaseTrainer._build_train_pipeline: ``ceil(len(train_loader.dataset) / max(batch_size, nbs)) * epochs``
    (the full dataset length and the TOTAL batch, on every rank)."""
    return math.ceil(dataset_size / max(batch, nbs)) * epochs


def auto_lr_fit(nc: int) -> float:
    """BaseTrainer.build_optimizer: ``lr_fit = round(0.002 * 5 / (4 + nc), 6)``."""
    return round(0.002 * 5 / (4 + nc), 6)


def resolve_auto_optimizer(nc: int, dataset_size: int, batch: int, nbs: int, epochs: int,
                           picks: tuple[str, str] = AUTO_PICKS) -> tuple[str, float, float]:
    """What ``optimizer='auto'`` becomes: BaseTrainer.build_optimizer.

    ``name, lr, momentum = ("MuSGD", 0.01, 0.9) if iterations > 10000 else ("AdamW", lr_fit, 0.9)``
    (`picks`: the pair of the installed release, e.g. ("SGD", "AdamW") in 8.3); it also sets
    ``args.warmup_bias_lr = 0.0`` and ignores args.lr0 / args.momentum. Returns (name, lr0, momentum).
    """
    iterations = auto_iterations(dataset_size, batch, nbs, epochs)
    if iterations > AUTO_ITERATIONS_THRESHOLD:
        return picks[0], 0.01, 0.9
    return picks[1], auto_lr_fit(nc), 0.9
