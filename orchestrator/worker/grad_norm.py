"""The gradient norm that Ultralytics clips, measured per epoch.

BaseTrainer.optimizer_step clips with `clip_grad_norm_(..., max_norm=10.0)`. The detection loss is a
sum over the images of a step, so the norm grows with the images per step: at a large batch the fixed
clip can bind on most steps and cap the very step the scaler's rules assume (docs/scaling.md). This
meter wraps torch.nn.utils.clip_grad_norm_ (it returns the norm before clipping) while the trainer
runs, keeps its sums on the device (no synchronisation per step) and gives, per epoch:
train/grad_norm (mean), train/grad_norm_max and train/clip_fraction (the share of steps it bound).
Non-finite norms (AMP steps the scaler skips) are left out of all three.
"""

from __future__ import annotations

KEYS = ("train/grad_norm", "train/grad_norm_max", "train/clip_fraction")


class GradNormMeter:
    def __init__(self) -> None:
        self._original = None
        self._sums = None  # tensor [finite steps, sum of norms, max norm, steps that bound]

    def _record(self, norm, max_norm: float) -> None:
        import torch

        norm = norm.detach().float()
        finite = torch.isfinite(norm)
        value = torch.where(finite, norm, torch.zeros_like(norm))
        row = torch.stack([finite.float(), value, value, (finite & (norm > max_norm)).float()])
        if self._sums is None or self._sums.device != row.device:
            self._sums = row
        else:
            self._sums = torch.stack([self._sums[0] + row[0], self._sums[1] + row[1],
                                      torch.maximum(self._sums[2], row[2]), self._sums[3] + row[3]])

    def on_train_start(self, trainer) -> None:
        import torch

        if self._original is not None:
            return
        original = self._original = torch.nn.utils.clip_grad_norm_

        def clip_grad_norm_(parameters, max_norm, *args, **kwargs):
            norm = original(parameters, max_norm, *args, **kwargs)
            self._record(norm, float(max_norm))
            return norm

        torch.nn.utils.clip_grad_norm_ = clip_grad_norm_

    def on_train_epoch_start(self, trainer) -> None:
        self._sums = None

    def epoch_metrics(self) -> dict[str, float]:
        """The epoch's three numbers (one synchronisation); empty when no step was clipped-checked."""
        if self._sums is None:
            return {}
        steps, total, peak, bound = (float(x) for x in self._sums.cpu().tolist())
        if steps == 0:
            return {}
        return {KEYS[0]: round(total / steps, 4), KEYS[1]: round(peak, 4), KEYS[2]: round(bound / steps, 4)}

    def restore(self, trainer=None) -> None:
        if self._original is not None:
            import torch

            torch.nn.utils.clip_grad_norm_ = self._original
            self._original = None

    def attach(self, model) -> None:
        model.add_callback("on_train_start", self.on_train_start)
        model.add_callback("on_train_epoch_start", self.on_train_epoch_start)
        model.add_callback("on_train_end", self.restore)
