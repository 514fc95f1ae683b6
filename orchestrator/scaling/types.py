"""The scaler's inputs and outputs. Pure data: no torch, no ultralytics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.devices import DeviceSpec
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.releases import Formulas

from orchestrator.scaling.rules import POLICIES  # noqa: F401  (re-exported: the job spec's Literal)
from orchestrator.errors import UserError
WARMUPS = ("auto", "keep")  # scaling.warmup: the rule's (lengthened from k = 4, or auto's decision), or the reference's


class ScalingError(UserError):
    """A target the scaler cannot honour (bad input: exit 2). Each line names the field and the fix."""


@dataclass(frozen=True)
class ReferenceHyp:
    """What the hyperparameters were tuned with (reference scale)."""

    world_size: int = 1  # devices (processes) the reference ran on
    batch: int = um.DEFAULTS["batch"]  # TOTAL batch over all devices, as Ultralytics' `batch`
    nbs: int = um.DEFAULTS["nbs"]
    optimizer: str = um.DEFAULTS["optimizer"]
    lr0: float = um.DEFAULTS["lr0"]
    lrf: float = um.DEFAULTS["lrf"]
    momentum: float = um.DEFAULTS["momentum"]
    weight_decay: float = um.DEFAULTS["weight_decay"]
    warmup_epochs: float = um.DEFAULTS["warmup_epochs"]
    warmup_momentum: float = um.DEFAULTS["warmup_momentum"]
    warmup_bias_lr: float = um.DEFAULTS["warmup_bias_lr"]
    epochs: int = um.DEFAULTS["epochs"]
    nc: int | None = None  # number of classes, when known
    dataset_size: int | None = None  # training images, when known
    task: str = "detect"  # Ultralytics task: classify's loss is a mean, the others' a sum (tasks.MEAN_LOSS_TASKS)
    pretrained: bool = False  # the job starts from weights (fine-tuning): auto quotes what was measured there

    @property
    def start(self) -> str:
        """How the training starts, as evidence.Gap.start names it."""
        return "pretrained" if self.pretrained else "scratch"
    # the installed Ultralytics release's formulas where releases differ (optimizer=auto, warmup, accumulate)
    formulas: Formulas = field(default_factory=Formulas)


@dataclass(frozen=True)
class TargetHardware:
    devices: DeviceSpec
    batch: int | None = None  # TOTAL batch; exclusive with batch_per_device
    batch_per_device: int | None = None
    max_batch_per_device: int | None = None
    # Ultralytics' train loader drops a short last batch (the job's overrides.compile); the XLA
    # loader always does and needs no flag (effective_values knows the device kind).
    drop_last: bool = False
    sync_bn: bool = False  # the job's sync_bn: BatchNorm statistics reduced over the devices (worker/sync_bn.py)


@dataclass
class ScaleResult:
    devices: str
    policy: str
    passed: dict[str, Any]  # exact Ultralytics train arguments to pass
    effective: dict[str, Any]  # what Ultralytics will really apply
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The reference's own effective values (same keys as `effective`, at reference scale,
    # after resolving optimizer=auto), and the scale factor the rule used: images per optimizer
    # step target/reference for auto/linear/sqrt, devices target/reference for table, 1 for none.
    reference_effective: dict[str, Any] = field(default_factory=dict)
    k: float = 1.0
    details: list[str] = field(default_factory=list)  # the mechanisms behind the reasons (plan --explain)

    def as_json(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "policy": self.policy,
            "passed": self.passed,
            "effective": self.effective,
            "reasons": self.reasons,
            "warnings": self.warnings,
            "reference_effective": self.reference_effective,
            "k": self.k,
            "details": self.details,
        }
