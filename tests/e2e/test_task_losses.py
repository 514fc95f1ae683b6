"""The loss semantics the scaler builds on, checked on each task's real Ultralytics trainer and loss:
detect, segment, pose and obb return a SUM over the images of a micro-batch, classify a MEAN
(scaling/scaler.py `_step_growth`, docs/scaling.md): the loss the trainer backpropagates is the
criterion's per-image-normalised components times the micro-batch's image count, or (classify) those
components themselves; and a classify micro-batch doubled (every image twice) keeps its loss. (Doubling
a detection batch is no test of the sum: its normaliser `target_scores_sum` is clamped at 1, which an
untrained model's tiny target scores hit, so there the loss grows faster than the images.) BatchNorm
runs on its running statistics, so an image's forward pass does not depend on its batch. Plus the one
line of `BaseTrainer._do_train` that multiplies every task's loss by the world size under DDP.
"""

from __future__ import annotations

import inspect
import os

os.environ.setdefault("YOLO_OFFLINE", "1")  # before ultralytics is imported

import pytest

from orchestrator.data.synth import generate_dataset
from orchestrator.scaling.scaler import scale
from orchestrator.scaling.types import ReferenceHyp, TargetHardware
from orchestrator.devices import parse_devices
from orchestrator.tasks import EXAMPLE_MODELS, MEAN_LOSS_TASKS, TASKS

pytestmark = pytest.mark.slow


def _trainer(task: str, tmp_path, **args):
    from orchestrator.worker.ddp import task_trainer

    data = generate_dataset(tmp_path / f"data-{task}", images=8, val_images=4, classes=2, imgsz=64, task=task)
    overrides = dict(model=EXAMPLE_MODELS[task], data=str(data), imgsz=64, epochs=1, device="cpu", workers=0,
                     amp=False, plots=False, val=False, verbose=False, seed=0, project=str(tmp_path / "runs"),
                     name=task, exist_ok=True)
    trainer = task_trainer(task)(overrides={**overrides, **args})
    trainer._setup_train()
    return trainer


def _doubled(batch: dict) -> dict:
    """The micro-batch with every image twice: per-image tensors and lists repeated, per-object targets
    repeated with the second copy's batch_idx pointing at the second copy of its image."""
    import torch

    n = batch["img"].shape[0]
    out = {}
    for key, value in batch.items():
        if key == "batch_idx":
            out[key] = torch.cat([value, value + n])
        elif isinstance(value, torch.Tensor):
            out[key] = torch.cat([value, value])
        else:
            out[key] = tuple(value) * 2
    return out


@pytest.mark.parametrize("task", TASKS)
def test_loss_is_a_sum_over_images_except_classify(task, tmp_path):
    import torch

    trainer = _trainer(task, tmp_path, batch=4, optimizer="SGD")
    model = trainer.model
    model.train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.eval()  # running statistics: an image's forward pass does not depend on its batch
    batch = trainer.preprocess_batch(next(iter(trainer.train_loader)))
    images = batch["img"].shape[0]
    with torch.no_grad():
        loss, items = model(batch)
        components = sum(v.sum().item() for v in items.values())
        assert components > 0
        if task in MEAN_LOSS_TASKS:
            assert loss.sum().item() == pytest.approx(components, rel=1e-5)
            assert model(_doubled(batch))[0].sum().item() == pytest.approx(loss.sum().item(), rel=1e-4)
        else:
            assert images == 4 and loss.sum().item() == pytest.approx(images * components, rel=1e-5)


def test_ddp_multiplies_every_tasks_loss_by_the_world_size():
    from ultralytics.engine.trainer import BaseTrainer

    source = inspect.getsource(BaseTrainer._do_train)
    assert "self.loss *= self.world_size" in source  # so a classify step grows with world x accumulate


@pytest.mark.parametrize("task", ["segment", "pose", "obb", "classify", "semantic", "depth"])
def test_task_trainer_applies_scaler_effective(task, tmp_path):
    """Each task's trainer applies the scaler's effective values as DetectionTrainer does
    (test_scaler_vs_ultralytics.py): accumulate, the optimizer, its weight decay and lr0."""
    ref = ReferenceHyp(optimizer="SGD", batch=8, nbs=8, dataset_size=8, nc=2, epochs=4, task=task)
    result = scale(ref, TargetHardware(parse_devices("cpu"), batch=4), "auto")
    if task == "classify":  # 2 micro-batches per step instead of 1: the mean loss's step doubles at lr0
        assert result.passed["lr0"] == pytest.approx(ref.lr0 / 2) and "classify loss is a mean" in " ".join(
            result.details)
    else:
        assert result.passed["lr0"] == ref.lr0
    trainer = _trainer(task, tmp_path, epochs=4, **result.passed)
    eff = result.effective
    assert trainer.accumulate == eff["accumulate"] == 2
    assert type(trainer.optimizer).__name__ == eff["optimizer"]
    for group in trainer.optimizer.param_groups:
        expected_wd = eff["weight_decay"] if group["param_group"] == "weight" else 0.0
        assert group["weight_decay"] == pytest.approx(expected_wd, rel=1e-12, abs=0)
        assert group["initial_lr"] == pytest.approx(eff["lr0"], rel=1e-12)
