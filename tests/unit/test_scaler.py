"""Worked examples for the hyperparameter scaler (pure python, fast)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from orchestrator.scaling import evidence
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.effective import effective_values
from orchestrator.scaling.scaler import scale
from orchestrator.scaling.rules import K_RULES, Arm
from orchestrator.scaling.stats import Interval
from orchestrator.scaling.types import ReferenceHyp, ScalingError, TargetHardware
from orchestrator.devices import parse_devices

SGD_REF = ReferenceHyp(optimizer="SGD", batch=16, nbs=64, lr0=0.01, weight_decay=0.0005)
KEYS = ("batch", "nbs", "optimizer", "lr0", "momentum", "weight_decay", "warmup_epochs", "warmup_bias_lr")


def tgt(devices: str, **kw) -> TargetHardware:
    return TargetHardware(parse_devices(devices), **kw)


def reason(result, key: str) -> str:
    lines = [r for r in result.reasons if r.startswith(f"{key} ")]
    assert len(lines) == 1, result.reasons
    return lines[0]


# ---------------------------------------------------------------- Ultralytics formulas


@pytest.mark.parametrize(
    "nbs,batch,acc",
    [(64, 16, 4), (64, 64, 1), (64, 128, 1), (64, 48, 1), (64, 32, 2), (96, 64, 2), (160, 64, 2), (64, 24, 3), (64, 1, 64)],
)
def test_accumulate_is_bankers_round_of_total(nbs, batch, acc):
    # round(0.5) = 0 -> 1; round(1.5) = 2; round(2.5) = 2; round(2.67) = 3
    assert um.accumulate(nbs, batch) == acc


def test_optimizer_weight_decay_factor():
    assert um.optimizer_weight_decay(0.0005, 16, 64) == pytest.approx(0.0005)  # 16*4/64 = 1
    assert um.optimizer_weight_decay(0.0005, 128, 64) == pytest.approx(0.001)  # 128*1/64 = 2
    assert um.optimizer_weight_decay(0.0005, 48, 64) == pytest.approx(0.000375)  # 48*1/64


def test_batches_per_epoch_distributed_sampler():
    # one process: all N; DDP: ceil(N/W) per rank, then ceil(. / b)
    assert um.batches_per_epoch(1000, 16, 1) == 63
    assert um.batches_per_epoch(1000, 16, 4) == 16  # ceil(250/16)
    assert um.batches_per_epoch(1001, 16, 4) == 16  # ceil(251/16)
    assert um.batches_per_epoch(5, 16, 1) == 1  # batch = min(batch, len(dataset))
    assert um.batches_per_epoch(1000, 16, 1, drop_last=True) == 62


def test_warmup_iterations_no_minimum_and_capped_at_epochs_minus_one():
    assert um.warmup_iterations(3.0, 100, 63) == 189
    assert um.warmup_iterations(3.0, 2, 10) == 10  # capped at epochs - 1 = 1
    assert um.warmup_iterations(3.0, 1, 10) == 0
    assert um.warmup_iterations(0.5, 100, 5) == 2  # round(2.5) = 2, banker's
    assert um.warmup_iterations(3.0, 100, 4) == 12  # no max(..., 100) in 8.4


def test_auto_optimizer_resolution():
    assert um.auto_lr_fit(80) == round(0.01 / 84, 6) == 0.000119
    assert um.auto_lr_fit(3) == 0.001429
    assert um.resolve_auto_optimizer(3, 1000, 16, 64, 100) == ("AdamW", 0.001429, 0.9)  # 16*100 iterations
    assert um.resolve_auto_optimizer(80, 118287, 16, 64, 100) == ("MuSGD", 0.01, 0.9)
    assert um.auto_iterations(640, 16, 64, 1000) == 10000  # not > 10000: AdamW
    assert um.resolve_auto_optimizer(1, 640, 16, 64, 1000)[0] == "AdamW"


def test_canonical_optimizer_names():
    assert um.canonical_optimizer("sgd") == "SGD"
    assert um.canonical_optimizer("RMSProp") == "RMSprop"
    assert um.canonical_optimizer("adamw") == "AdamW"
    assert um.canonical_optimizer("AUTO") == "auto"
    assert um.canonical_optimizer("lion") is None


# ---------------------------------------------------------------- policy auto


def test_one_to_four_gpus_batch16_per_gpu_keeps_images_per_step_and_lr():
    r = scale(SGD_REF, tgt("4"))
    assert r.passed == {
        "batch": 64,
        "nbs": 64,
        "optimizer": "SGD",
        "lr0": 0.01,
        "momentum": 0.937,
        "weight_decay": 0.0005,
        "warmup_epochs": 3.0,
        "warmup_bias_lr": 0.1,
    }
    e = r.effective
    assert (e["world_size"], e["batch_per_device"], e["accumulate"], e["images_per_step"]) == (4, 16, 1, 64)
    assert e["weight_decay"] == pytest.approx(0.0005)
    assert r.reference_effective["accumulate"] == 4 and r.reference_effective["images_per_step"] == 64
    assert r.k == 1.0
    assert [x.split(":")[0] for x in r.reasons] == ["batch 16 -> 64"]


def test_every_passed_key_present_and_optimizer_pinned():
    for policy in ("auto", "linear", "sqrt", "table", "none"):
        r = scale(ReferenceHyp(), tgt("2"), policy)  # reference optimizer=auto, nc unknown
        assert set(KEYS) <= set(r.passed)
        assert r.passed["optimizer"] == "SGD"
        assert set(r.passed) == set(KEYS)


def test_four_to_eight_gpus_at_32_per_gpu_scales_by_the_decided_sgd_rule():
    ref = ReferenceHyp(optimizer="SGD", world_size=4, batch=64, nbs=64)
    r = scale(ref, tgt("8", batch_per_device=32))
    assert r.passed["batch"] == 256
    assert r.effective["images_per_step"] == 256 and r.k == 4.0
    # the summed loss already grows the mean-gradient step x 4: auto takes the family's default, linear,
    # which keeps lr0 (docs/scaling.md 7I)
    assert r.passed["lr0"] == 0.01
    lr_line = reason(r, "lr0")
    assert lr_line.startswith("lr0 0.01 kept: auto takes linear, lr0 x 1 = k^0 (Ultralytics sums the loss over the "
                              "images of a step, so the SGD step already grows with the images per step: the same lr0 "
                              "is the linear rule): the family's default; in 7J's exploration no alternative beat it (lr0-sqrt - linear ")
    assert "(from scratch at k = 4, " in lr_line
    # nbs raised to the images per step: Ultralytics' wd factor 256*1/256 = 1; weight decay per epoch kept:
    # steps / 4, lr0 x 1, so the optimizer's weight decay x 4
    assert r.passed["nbs"] == 256 and r.effective["accumulate"] == 1
    assert "nbs 64 -> 256" in reason(r, "nbs")
    assert r.passed["weight_decay"] == pytest.approx(0.002)
    assert r.effective["weight_decay"] == pytest.approx(0.002)
    assert "keeps the decay per epoch (steps x 1/4, lr0 x 1): the optimizer's 0.0005 -> 0.002" in reason(r, "weight_decay")
    assert r.passed["warmup_epochs"] == 5.0
    assert "warmup_epochs 3 -> 5" in reason(r, "warmup_epochs")


def test_batch_128_rounding_round_half_to_even():
    """nbs 64, batch 128: round(0.5) = 0 -> accumulate 1; Ultralytics doubles weight decay."""
    r = scale(SGD_REF, tgt("cpu", batch=128), "none")
    assert r.passed["nbs"] == 64 and r.effective["accumulate"] == 1
    assert r.effective["images_per_step"] == 128
    assert r.passed["weight_decay"] == 0.0005
    assert r.effective["weight_decay"] == pytest.approx(0.001)
    # auto: k = 2, linear: lr0 kept (the summed loss gives x 2), nbs -> 128, effective wd x 2 (decay per epoch kept)
    a = scale(SGD_REF, tgt("cpu", batch=128))
    assert a.passed["lr0"] == 0.01
    assert a.passed["nbs"] == 128
    assert a.effective["accumulate"] == 1 and a.effective["images_per_step"] == 128
    assert a.effective["weight_decay"] == pytest.approx(0.001)
    assert a.passed["weight_decay"] == pytest.approx(0.001)
    assert a.passed["warmup_epochs"] == 3.0  # k = 2 < 4


def test_reference_batch_128_nbs_64_accumulate_one():
    ref = ReferenceHyp(optimizer="SGD", batch=128, nbs=64)
    r = scale(ref, tgt("4", batch=128))  # 32 per device, same images per step
    assert r.passed["batch"] == 128 and r.passed["nbs"] == 64 and r.k == 1.0
    assert r.passed["weight_decay"] == 0.0005
    assert r.effective["weight_decay"] == pytest.approx(r.reference_effective["weight_decay"]) == pytest.approx(0.001)


def test_passed_weight_decay_compensates_when_nbs_is_kept():
    """Reference batch 128 / nbs 64 (factor 2) to batch 32 accumulating 4 with nbs 128 (factor 1):
    the effective wd must stay 0.001, so the passed value doubles."""
    ref = ReferenceHyp(optimizer="SGD", batch=128, nbs=64)
    r = scale(ref, tgt("cpu", batch=32))
    assert r.passed["nbs"] == 128 and r.effective["accumulate"] == 4 and r.k == 1.0
    assert r.effective["weight_decay"] == pytest.approx(0.001)
    assert r.passed["weight_decay"] == pytest.approx(0.001)
    assert "not applied twice" in reason(r, "weight_decay")


def test_odd_total_uses_nearest_multiple():
    r = scale(SGD_REF, tgt("3"))  # 48 total: 64 is not a multiple; 48 (A=1) is nearer than 96
    assert r.effective["images_per_step"] == 48
    assert r.k == 0.75
    assert r.passed["lr0"] == 0.01  # linear: the summed loss's x 0.75 is the rule
    assert r.effective["weight_decay"] == pytest.approx(0.0005 * 0.75)
    assert "the family's default below the measured k" in reason(r, "weight_decay") or \
        r.passed["weight_decay"] != 0.0005


def test_small_total_accumulates_to_reference():
    ref = ReferenceHyp(optimizer="SGD", batch=64, world_size=4, nbs=64)
    r = scale(ref, tgt("cpu", batch=8))
    assert r.effective["accumulate"] == 8 and r.effective["images_per_step"] == 64
    assert r.passed["lr0"] == 0.01 and r.passed["weight_decay"] == 0.0005


def test_adam_family_linear_and_timescale_weight_decay():
    ref = ReferenceHyp(optimizer="AdamW", lr0=0.001, weight_decay=0.05, momentum=0.9)
    r = scale(ref, tgt("8", batch_per_device=32))  # 256 images per step, k = 4
    assert r.k == 4.0
    assert r.passed["lr0"] == pytest.approx(0.004)  # x k: the linear rule, measured for AdamW
    # lr' * wd' = k * lr * wd -> wd' = wd (effective); nbs 256 makes Ultralytics' own factor 1
    assert r.passed["nbs"] == 256
    assert r.effective["weight_decay"] == pytest.approx(0.05)
    assert r.passed["weight_decay"] == pytest.approx(0.05)
    assert r.effective["lr0"] * r.effective["weight_decay"] == pytest.approx(4 * 0.001 * 0.05)
    assert reason(r, "lr0").startswith("lr0 0.001 -> 0.004: auto takes linear, lr0 x 4 = k^1: the family's default")
    assert "the AdamW update ignores the gradient's scale" in r.details[0]


def test_linear_and_sqrt_policies_forced():
    ref = ReferenceHyp(optimizer="AdamW", lr0=0.001)
    lin = scale(ref, tgt("cpu", batch=256), "linear")
    assert lin.passed["lr0"] == pytest.approx(0.004)
    assert lin.effective["weight_decay"] == pytest.approx(0.0005)  # linear keeps wd
    # SGD: the literature's rules in mean-gradient terms; the summed loss already gives x k (k = 256/64 = 4)
    sq = scale(SGD_REF, tgt("cpu", batch=256), "sqrt")
    assert sq.passed["lr0"] == pytest.approx(0.005)  # x sqrt(k) / k
    assert sq.effective["weight_decay"] == pytest.approx(0.004)  # steps / 4, lr0 x 1/2: wd x 8
    assert reason(sq, "lr0").startswith("lr0 0.01 -> 0.005: sqrt rule (forced by policy): lr0 x 0.5 = k^-0.5")
    sgd_lin = scale(SGD_REF, tgt("cpu", batch=256), "linear")
    assert sgd_lin.passed["lr0"] == 0.01 and sgd_lin.effective["weight_decay"] == pytest.approx(0.002)
    assert reason(sgd_lin, "lr0") == ("lr0 0.01 kept: linear rule (forced by policy): lr0 x 1 = k^0 (Ultralytics sums the "
                                      "loss over the images of a step, so the SGD step already grows with the images "
                                      "per step: the same lr0 is the linear rule), k = 256/64 = 4 images per step")
    # what the rule does to the step Ultralytics really takes (clipped), for plan --explain: nothing, so 4 x less per epoch
    assert sgd_lin.details[0].startswith("lr0: Ultralytics' summed loss grows the SGD gradient with the images per step")
    assert sgd_lin.details[0].endswith("so lr0 x 1 makes the clipped step x 1 and the movement per epoch x 0.25")


def test_scaling_down_lr_below_reference():
    ref = ReferenceHyp(optimizer="SGD", world_size=8, batch=256, nbs=64)  # 256 images per step
    r = scale(ref, tgt("cpu", batch=16))  # 16 divides 256: accumulate 16 keeps it
    assert r.effective["images_per_step"] == 256 and r.passed["nbs"] == 256
    assert r.passed["lr0"] == 0.01
    # nbs 64 -> 256 changed Ultralytics' factor from 4 to 1: passed wd compensates
    assert r.effective["weight_decay"] == pytest.approx(r.reference_effective["weight_decay"]) == pytest.approx(0.002)
    assert r.passed["weight_decay"] == pytest.approx(0.002)
    assert "nbs 64 -> 256" in reason(r, "nbs")
    assert "weight_decay 0.0005 -> 0.002" in reason(r, "weight_decay")


# ---------------------------------------------------------------- policy table / none


def test_table_policy_reproduces_practitioner_numbers():
    r = scale(SGD_REF, tgt("4"), "table")
    assert r.passed["batch"] == 64
    assert r.effective["lr0"] == pytest.approx(0.04)
    assert r.effective["weight_decay"] == pytest.approx(0.002)
    assert r.passed["warmup_epochs"] == 5.0
    assert r.k == 4.0
    # Ultralytics' factor here is 64*1/64 = 1, so passed == effective
    assert r.passed["weight_decay"] == pytest.approx(0.002)
    assert any("images per optimizer step go 64 -> 64" in w and "`auto`" in w for w in r.warnings)


def test_table_policy_compensates_ultralytics_weight_decay_scaling():
    """8 GPUs x 16 = 128 total: Ultralytics would already double wd (128/64); the table's x8 is not doubled."""
    r = scale(SGD_REF, tgt("8"), "table")
    assert r.effective["lr0"] == pytest.approx(0.08)
    assert r.effective["weight_decay"] == pytest.approx(0.004)  # ref effective 0.0005 x 8
    assert r.passed["weight_decay"] == pytest.approx(0.002)  # x 128/64 inside Ultralytics = 0.004


def test_none_policy_passes_reference_through():
    ref = ReferenceHyp(optimizer="AdamW", lr0=0.002, weight_decay=0.01, warmup_epochs=1.0)
    r = scale(ref, tgt("8"), "none")
    for key in ("nbs", "optimizer", "lr0", "momentum", "weight_decay", "warmup_epochs", "warmup_bias_lr"):
        assert r.passed[key] == getattr(ref, key), key
    assert r.passed["batch"] == 128
    assert r.effective["weight_decay"] == pytest.approx(0.02)  # stock Ultralytics: x 128/64
    assert r.k == 1.0


# ---------------------------------------------------------------- target batch handling


def test_non_divisible_total_batch_error_message():
    with pytest.raises(ScalingError) as ei:
        scale(SGD_REF, tgt("4", batch=30))
    assert ei.value.problems == ["target.batch: 30 is not divisible by 4 devices; nearest valid: 28 or 32"]
    with pytest.raises(ScalingError, match="nearest valid: 8$"):
        scale(SGD_REF, tgt("8", batch=5))


def test_batch_and_batch_per_device_exclusive():
    with pytest.raises(ScalingError, match="not both"):
        scale(SGD_REF, tgt("2", batch=32, batch_per_device=16))


def test_invalid_inputs_all_reported():
    with pytest.raises(ScalingError) as ei:
        scale(ReferenceHyp(batch=-1, optimizer="lion"), tgt("2"), "cubic")
    text = str(ei.value)
    assert "policy: 'cubic'" in text and "reference.batch" in text and "reference.optimizer: 'lion'" in text
    with pytest.raises(ScalingError, match="reference.batch: 30 is not divisible by reference.world_size 4"):
        scale(ReferenceHyp(batch=30, world_size=4), tgt("2"))


def test_max_batch_per_device_lowers_batch_and_raises_nbs():
    r = scale(SGD_REF, tgt("4", batch_per_device=64, max_batch_per_device=24))
    # planned: 256 total > 64 images -> k = 4; per device 64 > 24 -> 16 (largest divisor of 64 <= 24)
    assert r.passed["batch"] == 64 and r.effective["batch_per_device"] == 16
    assert r.passed["nbs"] == 256 and r.effective["accumulate"] == 4
    assert r.effective["images_per_step"] == 256
    assert r.passed["lr0"] == 0.01
    assert r.effective["weight_decay"] == pytest.approx(0.002)
    assert "max_batch_per_device 24" in reason(r, "batch")
    assert "nbs 64 -> 256" in reason(r, "nbs")


def test_max_batch_per_device_not_binding():
    r = scale(SGD_REF, tgt("4", max_batch_per_device=16))
    assert r.passed["batch"] == 64 and r.passed["nbs"] == 64


def test_lr_above_one_is_refused():
    with pytest.raises(ScalingError, match=r"lr0: 1.28 after linear scaling .* outside \[0, 1\]"):
        scale(ReferenceHyp(optimizer="AdamW", lr0=0.01), tgt("cpu", batch=8192), "linear")


# ---------------------------------------------------------------- optimizer=auto


def test_optimizer_auto_resolved_to_adamw_and_pinned():
    ref = ReferenceHyp(optimizer="auto", lr0=0.01, nc=3, dataset_size=1000)  # 16*100 = 1600 iterations
    r = scale(ref, tgt("4"))
    assert r.passed["optimizer"] == "AdamW"
    assert r.passed["lr0"] == 0.001429  # round(0.01/7, 6); k = 1
    assert r.passed["momentum"] == 0.9
    assert r.passed["warmup_bias_lr"] == 0.0
    assert "optimizer auto -> AdamW" in reason(r, "optimizer")
    assert "round(0.002*5/(4+nc=3), 6)" in reason(r, "lr0")
    assert "momentum 0.937 -> 0.9" in reason(r, "momentum")
    assert "warmup_bias_lr 0.1 -> 0" in reason(r, "warmup_bias_lr")
    assert any("ignored lr0=0.01" in w for w in r.warnings)


def test_optimizer_auto_resolved_to_musgd_then_scaled():
    ref = ReferenceHyp(optimizer="auto", nc=80, dataset_size=118287)  # 1849*100 iterations > 10000
    r = scale(ref, tgt("8", batch_per_device=32))
    assert r.passed["optimizer"] == "MuSGD"
    assert r.k == 4.0 and r.passed["lr0"] == 0.01  # SGD-family auto from scratch: linear, lr0 kept
    # warmup ran at the reference, so _do_train left momentum at args.momentum: keep 0.937
    assert r.passed["momentum"] == 0.937


def test_optimizer_auto_unknown_pins_sgd_with_warning():
    r = scale(ReferenceHyp(optimizer="auto"), tgt("2"))
    assert r.passed["optimizer"] == "SGD" and r.passed["lr0"] == 0.01
    assert "pinned SGD" in reason(r, "optimizer")
    assert any("nc and dataset_size" in w for w in r.warnings)


def test_optimizer_auto_target_would_differ_warning():
    # reference: ceil(4000/max(16, 64))*200 = 12600 > 10000 -> MuSGD;
    # target 8 x 16 = 128: ceil(4000/128)*200 = 6400 -> auto would pick AdamW there
    ref = ReferenceHyp(optimizer="auto", nc=2, dataset_size=4000, epochs=200)
    r = scale(ref, tgt("8"))
    assert r.passed["optimizer"] == "MuSGD"
    assert any("would pick AdamW at the target" in w for w in r.warnings)


# ---------------------------------------------------------------- devices


def test_tpu_v3_8_per_core_batch():
    """Precision is the plan's (it knows the job's xla.bf16): tests/unit/test_plan_cli.py."""
    r = scale(SGD_REF, tgt("tpu:8"))
    assert r.effective["world_size"] == 8 and r.effective["batch_per_device"] == 16
    assert r.passed["batch"] == 128
    assert r.effective["images_per_step"] == 128 and r.passed["lr0"] == 0.01
    assert any(w.startswith("tpu:") for w in r.warnings)
    assert "precision" not in scale(SGD_REF, tgt("4")).effective


def test_xla_cpu_and_cpu_n_world_sizes():
    assert scale(SGD_REF, tgt("xla:cpu")).effective["world_size"] == 1
    r = scale(SGD_REF, tgt("cpu:2"))
    assert r.effective["world_size"] == 2 and r.passed["batch"] == 32 and r.effective["accumulate"] == 2


def test_multi_node():
    r = scale(SGD_REF, tgt("2x4"))
    assert r.effective["world_size"] == 8 and r.passed["batch"] == 128
    assert any("2 nodes" in w for w in r.warnings)


def test_dataset_dependent_effective_values():
    ref = ReferenceHyp(optimizer="SGD", dataset_size=1000, epochs=100)
    r = scale(ref, tgt("4"))
    e = r.effective
    assert e["samples_per_device"] == 250 and e["batches_per_epoch"] == 16
    assert e["optimizer_steps_per_epoch"] == 16.0
    assert e["warmup_iterations"] == 48
    assert r.reference_effective["batches_per_epoch"] == 63
    assert r.reference_effective["warmup_iterations"] == 189


def test_effective_values_tiny_dataset_caps_accumulate():
    e = effective_values(
        {"batch": 4, "nbs": 64, "optimizer": "SGD", "lr0": 0.01, "momentum": 0.9, "weight_decay": 0.0005,
         "warmup_epochs": 0, "warmup_bias_lr": 0.1},
        world_size=1, epochs=2, dataset_size=8,
    )
    assert e["batches_per_epoch"] == 2 and e["accumulate"] == 4  # min(16, 2*2)
    assert e["weight_decay"] == pytest.approx(0.0005)  # uses the uncapped 16: 4*16/64


def test_result_is_json_serialisable():
    import json

    r = scale(ReferenceHyp(nc=80, dataset_size=118287), tgt("tpu:8"), "table")
    json.dumps(r.as_json())


def test_scaler_imports_no_torch_or_ultralytics():
    code = (
        "import sys; import orchestrator.scaling.scaler as s; "
        "bad = [m for m in ('torch', 'ultralytics', 'numpy') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_warmup_capped_warning():
    r = scale(ReferenceHyp(optimizer="SGD", epochs=4), tgt("cpu", batch=256))
    assert r.passed["warmup_epochs"] == 5.0
    assert r.effective["warmup_epochs"] == 3
    assert any("capped" in w for w in r.warnings)
    assert r.passed["lr0"] == 0.01


# ---------------------------------------------------------------- reasons for values kept, warnings per step


def test_table_weight_decay_kept_but_applied_x4_is_explained():
    """16 per device x 4 from a batch-16/nbs-16 reference: the passed weight decay stays 0.0005 while the
    optimizer gets 0.002; the reason says so."""
    ref = ReferenceHyp(optimizer="SGD", batch=16, nbs=16)
    r = scale(ref, tgt("4"), "table")
    assert r.passed["weight_decay"] == 0.0005 and r.effective["weight_decay"] == pytest.approx(0.002)
    assert reason(r, "weight_decay") == (
        "weight_decay 0.0005 kept: table rule effective weight decay x 4 (k = 4/1 devices); "
        "Ultralytics applies 0.002 (x batch*accumulate/nbs = 64/16)"
    )
    assert reason(r, "lr0") == "lr0 0.01 -> 0.04: table rule lr0 x 4 (k = 4/1 devices)"


def test_none_says_what_stock_ultralytics_keeps_per_family():
    sgd = scale(SGD_REF, tgt("cpu", batch=256), "none")
    assert reason(sgd, "lr0") == "lr0 0.01 kept: policy none: stock Ultralytics' values; k = 256/64 = 4 images per step"
    adam = scale(ReferenceHyp(optimizer="AdamW", lr0=0.001), tgt("cpu", batch=256), "none")
    assert adam.passed["lr0"] == 0.001
    assert "Ultralytics applies 0.002 (x batch*accumulate/nbs = 256/64)" in reason(adam, "weight_decay")


def test_rmsprop_is_scaled_as_scale_free():
    r = scale(ReferenceHyp(optimizer="RMSprop", lr0=0.001), tgt("cpu", batch=256))
    assert r.passed["lr0"] == pytest.approx(0.004)  # x 4, as AdamW: its update ignores the gradient's scale
    assert "auto takes linear, lr0 x 4 = k^1" in reason(r, "lr0")
    sq = scale(ReferenceHyp(optimizer="RMSprop", lr0=0.001), tgt("cpu", batch=256), "sqrt")  # weight decay x 2
    assert any("RMSprop applies weight decay as coupled L2" in w for w in sq.warnings)


def test_musgd_warns_that_its_muon_branch_is_scale_free():
    r = scale(ReferenceHyp(optimizer="MuSGD"), tgt("cpu", batch=256))
    assert r.passed["lr0"] == 0.01
    assert any(w.startswith("MuSGD is scaled as SGD-family") for w in r.warnings)


def test_ema_clip_and_bias_warmup_warnings():
    ref = ReferenceHyp(optimizer="SGD", lr0=0.08, batch=16, nbs=16, dataset_size=2048, epochs=30)
    r = scale(ref, tgt("cpu", batch=64))  # k = 4
    ema = next(w for w in r.details if "EMA" in w)  # an explanation (plan --explain), not a warning
    assert "spans 15.6 epochs at the reference and 62.5 here" in ema
    assert f"it bound on {evidence.clip_bound()}" in ema and "the SGD step's length follows lr0 alone" in ema
    adam = scale(dataclasses.replace(ref, optimizer="AdamW", lr0=0.04), tgt("cpu", batch=64))  # lr0 0.16 > 0.1
    assert adam.passed["lr0"] == pytest.approx(0.16)
    assert any("bias lr now rises instead of falling" in w for w in adam.warnings)
    same = scale(SGD_REF, tgt("4"))  # images per step unchanged: no per-step warning
    assert not any("EMA" in w for w in same.details)


# ----------------------------------------------------------------- classify's mean loss

def _cls(opt="SGD", **kw):
    return ReferenceHyp(optimizer=opt, lr0=0.01, weight_decay=0.0005, batch=64, nbs=64, task="classify", **kw)


def test_classify_sgd_same_images_more_micro_batches_divides_lr0():
    """batch 64 -> 16 on one device: 64 images per step either way, but 4 micro-batch means are added up
    instead of 1, so the SGD step would be 4x: lr0 / 4 and the weight decay x 4 keep the step and the decay."""
    r = scale(_cls(), TargetHardware(parse_devices("cpu"), batch=16), "auto")
    assert (r.passed["batch"], r.passed["nbs"], r.passed["lr0"], r.passed["weight_decay"]) == (16, 64, 0.0025, 0.002)
    assert "classify loss is a mean per micro-batch" in r.details[0] and "(x 4)" in r.details[0]


def test_classify_ddp_multiplies_by_world_size():
    """2 GPUs, the same 64 images per step: DDP's x world_size makes 2 micro-batch means per step."""
    r = scale(_cls(), TargetHardware(parse_devices("0,1"), batch=64), "auto")
    assert (r.passed["lr0"], r.passed["weight_decay"]) == (0.005, 0.001)


def test_classify_adam_family_ignores_the_micro_batches():
    r = scale(_cls("AdamW"), TargetHardware(parse_devices("cpu"), batch=16), "auto")
    assert (r.passed["lr0"], r.passed["weight_decay"]) == (0.01, 0.0005)


def test_classify_k4_keeps_detects_mean_gradient_step():
    """k = 4 images per step on 4 devices: the mean-gradient step grows as for detect (x k under auto's
    linear), so lr0 x 4/4 = 1 where detect keeps lr0 too (its summed loss gives the x 4)."""
    target = TargetHardware(parse_devices("0,1,2,3"), batch=256)
    cls = scale(_cls(), target, "auto")
    det = scale(dataclasses.replace(_cls(), task="detect"), target, "auto")
    assert cls.passed["lr0"] == det.passed["lr0"] == 0.01


def test_classify_none_policy_says_the_step_grows():
    r = scale(_cls(), TargetHardware(parse_devices("cpu"), batch=16), "none")
    assert r.passed["lr0"] == 0.01
    assert r.passed["weight_decay"] == 0.0005 and r.k == 1.0  # stock Ultralytics: its step grows x 4 (docs 3)


def test_classify_adamw_takes_the_default_rule_its_rows_could_not_reject():
    """classify's square-root exception rested on one collapsed seed: by the procedure (an interval above 0)
    its rows keep the family's default, lr0 x k, as detect does."""
    target = TargetHardware(parse_devices("cpu"), batch=256)
    cls = scale(_cls("AdamW"), target, "auto")
    det = scale(dataclasses.replace(_cls("AdamW"), task="detect"), target, "auto")
    assert cls.passed["lr0"] == det.passed["lr0"] == 0.04
    assert _decided("classify", "scratch", "Adam", 4)["rule"] == "linear"


def test_segment_quotes_its_own_rows_pose_detects():
    """segment's plans quote segment's decision rows; pose has none of its own, so its plans quote detect's."""
    def lr_reason(task: str, batch: int) -> str:
        ref = ReferenceHyp(optimizer="SGD", lr0=0.01, batch=16, nbs=16, task=task)
        plan = scale(ref, TargetHardware(parse_devices("cpu"), batch=batch), "auto")
        assert plan.passed["lr0"] == 0.01
        return next(x for x in plan.reasons if x.startswith("lr0"))

    seg, det = _decided("segment", "scratch", "SGD", 2), _decided("detect", "scratch", "SGD", 2)
    assert Interval.from_json(seg["gap"]).text() in lr_reason("segment", 32)
    assert Interval.from_json(det["gap"]).text() in lr_reason("pose", 32)


SGD_K8_REF = ReferenceHyp(optimizer="SGD", batch=8, nbs=8)
FT_SGD = ReferenceHyp(optimizer="SGD", batch=8, nbs=8, epochs=10, pretrained=True)


def _decided(task: str, start: str, family: str, k: float) -> dict:
    """evidence.json's decision row (the file the procedure generated from the saved results)."""
    return next(d for d in evidence.load()["decisions"] if (d["task"], d["start"], d["family"], d["k"]) ==
                (task, start, family, k))


OPTIMIZERS_BY_FAMILY = {"SGD": ReferenceHyp(optimizer="SGD", batch=8, nbs=8),
                        "MuSGD": ReferenceHyp(optimizer="MuSGD", batch=8, nbs=8, momentum=0.9),
                        "AdamW": ReferenceHyp(optimizer="AdamW", lr0=0.001, batch=8, nbs=8, momentum=0.9),
                        "NAdam": ReferenceHyp(optimizer="NAdam", lr0=0.001, batch=8, nbs=8, momentum=0.9)}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS_BY_FAMILY))
@pytest.mark.parametrize("pretrained", [False, True])
def test_auto_passes_the_same_values_on_every_device_at_the_same_images_per_step(optimizer, pretrained):
    """The same job at the same images per step gets the same values on a CPU, CPU processes, GPUs, TPU
    cores and XLA on the CPU: the device is no part of auto's key (docs/scaling.md 7I)."""
    ref = dataclasses.replace(OPTIMIZERS_BY_FAMILY[optimizer], pretrained=pretrained)
    for k in (2, 4, 8, 16):
        plans = {d: scale(ref, tgt(d, batch=8 * k)) for d in ("cpu", "cpu:2", "0", "0,1,2,3", "tpu:8", "xla:cpu:2")}
        assert len({tuple(sorted(p.passed.items())) for p in plans.values()}) == 1, (k, plans)
        assert all(p.effective["images_per_step"] == 8 * k for p in plans.values())


def test_auto_takes_the_rule_the_evidence_decided_and_quotes_its_row():
    """SGD from scratch at k = 8: linear (the prior; no hypothesis there, 7K point 5); SGD fine-tuning at k = 8:
    whatever 7K made of its hypothesis, lr0 x sqrt(k) with the reference's warmup (confirmed, or awaiting its
    fresh runs) or linear (rejected). The reason quotes what decided the row, as evidence.json holds it."""
    scratch = scale(SGD_K8_REF, tgt("0", batch=64))
    row = _decided("detect", "scratch", "SGD", 8)
    assert row["rule"] == "linear" and scratch.passed["lr0"] == 0.01 and scratch.passed["warmup_epochs"] == 5.0
    assert scratch.passed == scale(SGD_K8_REF, tgt("0", batch=64), "linear").passed
    assert f"(from scratch at k = 8, {Interval.from_json(row['gap']).text()} vs the reference" in reason(scratch, "lr0")
    tune = scale(FT_SGD, tgt("cpu", batch=64))
    row = _decided("detect", "pretrained", "SGD", 8)
    arm = Arm.parse(row["rule"])
    assert row["confirmation"]["hypothesis"] == "lr0-sqrt (warmup kept)"
    assert arm.rule == ("linear" if row["basis"] == "rejected" else "lr0-sqrt")
    assert tune.passed["lr0"] == pytest.approx(0.01 * 8 ** K_RULES[arm.rule]["SGD"])
    assert tune.passed["warmup_epochs"] == (3.0 if arm.keep_warmup else 5.0)
    assert tune.effective["weight_decay"] == pytest.approx(0.0005 * 8 ** (1 - K_RULES[arm.rule]["SGD"]))  # per epoch kept
    assert f"auto takes {arm.label}, lr0 x {8 ** K_RULES[arm.rule]['SGD']:.4g} = k^{K_RULES[arm.rule]['SGD']:g}: " \
        f"{evidence.basis_text(row)}" in reason(tune, "lr0")


def test_auto_between_and_beyond_the_measured_k():
    """Step 5 of the procedure: between two measured k the lower one's rule, beyond the largest its rule,
    said as extrapolated (in the reason and a warning); below the smallest the default."""
    between = scale(FT_SGD, tgt("cpu", batch=48))  # k = 6: k = 4's rule, linear
    assert between.passed["lr0"] == 0.01
    far = scale(FT_SGD, tgt("cpu", batch=128))  # k = 16: k = 8's rule, lr0 x sqrt(16)
    assert far.passed["lr0"] == pytest.approx(0.04)
    assert "(fine-tuning at k = 8, extrapolated beyond, " in reason(far, "lr0")
    assert any(w.startswith("k = 16 is beyond the measured k <= 8 when fine-tuning") for w in far.warnings)
    below = scale(FT_SGD, tgt("cpu", batch=16))  # k = 2: no fine-tuning row below k = 4
    assert "the family's default below the measured k" in reason(below, "weight_decay") or \
        "below the measured k" in " ".join(below.reasons)


def test_a_rule_that_lost_to_the_reference_names_the_best_measured_rule():
    """From scratch at k = 8, stock Ultralytics (AdamW) lost more than 0.02 to the reference: the warning gives
    its pooled gap and the rule that kept it, with the policy to set."""
    r = scale(ReferenceHyp(optimizer="AdamW", lr0=0.001, batch=8, nbs=8), tgt("cpu", batch=64), "none")
    gap = next(w for w in r.warnings if w.startswith("from scratch at k = 8"))
    assert gap.startswith("from scratch at k = 8: none -0.087 [") and gap.endswith("kept it (--set scaling.policy=linear)")
    kept = scale(ReferenceHyp(optimizer="AdamW", lr0=0.001, batch=8, nbs=8), tgt("cpu", batch=64))
    assert not any(w.startswith("from scratch at k") for w in kept.warnings)


def test_fine_tuning_quotes_what_more_epochs_did():
    """SGD fine-tuning at k = 8 with `linear`, which lost more than 0.02 to the reference: the warning gives its
    gap, the best rule's and what the rules trained for 20 epochs measured, with the epochs to set; auto's own
    rule warns only where its pooled gap is beyond 0.02 too."""
    gap = next(w for w in scale(FT_SGD, tgt("cpu", batch=64), "linear").warnings if w.startswith("fine-tuning at k = 8"))
    rows = [g for g in evidence.rows_at("SGD", 8, "pretrained") if not g.arm.longer]
    linear, best = next(g for g in rows if g.arm.label == "linear"), max(rows, key=lambda g: g.gap.mean)
    assert gap.startswith(f"fine-tuning at k = 8: {linear.text()}; the best there, {best.text()}")
    assert "measured with more epochs: lr0-sqrt, 20 epochs +0.080 [" in gap and gap.endswith("--set epochs=20, at 2x the cost")
    decided = next(g for g in rows if g.arm.label == _decided("detect", "pretrained", "SGD", 8)["rule"])
    warned = any(w.startswith("fine-tuning at k = 8") for w in scale(FT_SGD, tgt("cpu", batch=64)).warnings)
    assert warned == (decided.gap.mean < -evidence.KEPT_GAP)
    adam = ReferenceHyp(optimizer="AdamW", lr0=0.001429, momentum=0.9, batch=8, nbs=8, epochs=10, pretrained=True)
    r = scale(adam, tgt("cpu", batch=64))
    assert r.passed["lr0"] == pytest.approx(0.001429 * 8)
    assert not any(w.startswith("fine-tuning at k") for w in r.warnings)  # -0.016: within 0.02
    assert any("do not judge this run by its first epochs" in w for w in r.warnings)


def test_few_optimizer_steps_warn_with_the_measured_gap_and_offer_epochs():
    ref = ReferenceHyp(optimizer="AdamW", lr0=0.001, batch=16, nbs=16, dataset_size=256, epochs=30)
    r = scale(ref, tgt("cpu", batch=64))  # k = 4: 4 steps an epoch, 120 in all (the reference: 480)
    few = [w for w in r.warnings if "optimizer steps in all" in w]
    assert len(few) == 1, r.warnings
    assert few[0].startswith("120 optimizer steps in all (the reference: 480), fewer than the 960")
    assert "in 120 steps in all, auto ended 0.200 mAP50-95 below the reference's 0.347 (the gap: -0.200 [" in few[0]
    assert "trained 120 epochs instead, so with the reference's number of steps again, it ended 0.741" in few[0]
    assert "--set epochs=120 keeps the reference's steps, at 4x" in few[0]
    assert "lost -" not in few[0]  # no double negative
    many = scale(ReferenceHyp(optimizer="AdamW", batch=16, nbs=16, dataset_size=2048, epochs=30), tgt("cpu", batch=64))
    assert not any("optimizer steps in all" in w for w in many.warnings)  # 960 steps: measured enough


def test_table_quotes_its_measured_rows():
    table = scale(ReferenceHyp(optimizer="AdamW", lr0=0.001, batch=16, nbs=16), tgt("cpu", batch=64), "table")
    assert any("measured on one process, where it keeps lr0 and the optimizer's weight decay: table -0.078 [" in w
               for w in table.warnings)


def test_scaling_warmup_keep_keeps_the_references_warmup_and_says_so():
    """scaling.warmup: keep (the job's scaling section): the rule's lr0 and weight decay, the reference's warmup."""
    adam = ReferenceHyp(optimizer="AdamW", lr0=0.001, batch=8, nbs=8, momentum=0.9)
    lengthened, kept = scale(adam, tgt("cpu", batch=64)), scale(adam, tgt("cpu", batch=64), "auto", "keep")
    assert (lengthened.passed["warmup_epochs"], kept.passed["warmup_epochs"]) == (5.0, 3.0)
    assert {k: v for k, v in kept.passed.items() if k != "warmup_epochs"} == \
        {k: v for k, v in lengthened.passed.items() if k != "warmup_epochs"}
    assert reason(kept, "warmup_epochs") == "warmup_epochs 3 kept: scaling.warmup keep (the rule would lengthen it to 5)"
    with pytest.raises(ScalingError, match="scaling.warmup: 'short' is not one of auto, keep"):
        scale(adam, tgt("cpu", batch=64), "auto", "short")


def test_sgd_fine_tuning_at_k4_takes_the_values_its_decision_names():
    """The fine-tuning warmup campaign (docs/scaling-campaigns.md G5) made stock Ultralytics' values (linear with
    the reference's warmup) 7K's hypothesis at k = 4; auto passes exactly the training its decision row names,
    and the reason says what decided it."""
    row = _decided("detect", "pretrained", "SGD", 4)
    assert row["confirmation"]["hypothesis"] == "none" and row["rule"] in ("none", "linear")
    r = scale(FT_SGD, tgt("cpu", batch=32))
    named = scale(FT_SGD, tgt("cpu", batch=32), row["rule"])
    keys = ("images_per_step", "lr0", "weight_decay", "warmup_epochs")  # the same training (nbs splits it otherwise)
    assert [r.effective[k] for k in keys] == [pytest.approx(named.effective[k]) for k in keys]
    assert r.passed["warmup_epochs"] == (3.0 if row["rule"] == "none" else 5.0)
    assert f"{evidence.basis_text(row)} (fine-tuning at k = 4, " in reason(r, "lr0")


def test_musgd_takes_its_own_row_where_its_pairs_differed_from_sgds():
    """7J point 2: from scratch at k = 8 MuSGD's own pairs put lr0-sqrt above linear, so auto passes MuSGD lr0 x
    sqrt(8) while SGD keeps linear at the same images per step, and the reason says whose pairs decided."""
    row = _decided("detect", "scratch", "MuSGD", 8)
    arm = Arm.parse(row["rule"])
    musgd = scale(ReferenceHyp(optimizer="MuSGD", batch=8, nbs=8, momentum=0.9), tgt("cpu", batch=64))
    sgd = scale(SGD_K8_REF, tgt("cpu", batch=64))
    assert musgd.passed["lr0"] == pytest.approx(0.01 * 8 ** {"lr0-sqrt": 0.5, "linear": 0.0}[arm.rule])
    assert sgd.passed["lr0"] == 0.01 and "MuSGD's own pairs" in reason(musgd, "lr0")
    # a cell without MuSGD rows of its own: SGD's row, and the plan says MuSGD was not measured there
    tune4 = scale(ReferenceHyp(optimizer="MuSGD", batch=8, nbs=8, momentum=0.9, epochs=10, pretrained=True),
                  tgt("cpu", batch=32))
    assert "not measured for MuSGD here" in reason(tune4, "lr0")
