"""worker/grad_norm.py: the norm Ultralytics clips at, measured per epoch with real torch."""

import pytest
import torch

from orchestrator.worker.grad_norm import GradNormMeter


def _grads(norm: float) -> list[torch.nn.Parameter]:
    """Two parameters whose gradient has exactly this total norm."""
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(4))
    a.grad = torch.tensor([norm * 0.6, 0.0, 0.0])
    b.grad = torch.tensor([0.0, norm * 0.8, 0.0, 0.0])
    return [a, b]


def test_epoch_metrics_count_the_steps_the_clip_bound():
    original = torch.nn.utils.clip_grad_norm_
    meter = GradNormMeter()
    meter.on_train_start(None)
    try:
        meter.on_train_epoch_start(None)
        for norm in (20.0, 5.0, 40.0, 1.0):
            returned = torch.nn.utils.clip_grad_norm_(_grads(norm), max_norm=10.0)
            assert float(returned) == pytest.approx(norm)  # the caller still gets the norm
        metrics = meter.epoch_metrics()
        assert metrics == {"train/grad_norm": 16.5, "train/grad_norm_max": 40.0, "train/clip_fraction": 0.5}
        params = _grads(20.0)
        torch.nn.utils.clip_grad_norm_(params, max_norm=10.0)
        assert torch.linalg.vector_norm(torch.cat([p.grad for p in params])).item() <= 10.0 + 1e-4  # still clips

        meter.on_train_epoch_start(None)  # a new epoch starts from nothing
        assert meter.epoch_metrics() == {}
        torch.nn.utils.clip_grad_norm_(_grads(float("inf")), max_norm=10.0)  # an AMP step the scaler skips
        torch.nn.utils.clip_grad_norm_(_grads(4.0), max_norm=10.0)
        assert meter.epoch_metrics() == {"train/grad_norm": 4.0, "train/grad_norm_max": 4.0,
                                         "train/clip_fraction": 0.0}
    finally:
        meter.restore()
    assert torch.nn.utils.clip_grad_norm_ is original


def test_attach_registers_its_hooks_and_restore_is_idempotent():
    hooks = {}

    class Model:
        def add_callback(self, name, fn):
            hooks.setdefault(name, []).append(fn)

    meter = GradNormMeter()
    meter.attach(Model())
    assert set(hooks) == {"on_train_start", "on_train_epoch_start", "on_train_end"}
    original = torch.nn.utils.clip_grad_norm_
    hooks["on_train_start"][0](None)
    hooks["on_train_start"][0](None)  # twice: still one wrapper
    hooks["on_train_end"][0](None)
    meter.restore()
    assert torch.nn.utils.clip_grad_norm_ is original
