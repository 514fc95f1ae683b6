"""Property tests for the scaler (hypothesis): the rules hold for any valid batch/device combination."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from orchestrator.scaling import evidence
from orchestrator.scaling import ultralytics_math as um
from orchestrator.scaling.effective import effective_values
from orchestrator.scaling.scaler import scale
from orchestrator.scaling.types import ReferenceHyp, ScalingError, TargetHardware
from orchestrator.devices import parse_devices

KEYS = ("batch", "nbs", "optimizer", "lr0", "momentum", "weight_decay", "warmup_epochs", "warmup_bias_lr")
REL = 1e-9

SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def references(draw, optimizers=um.OPTIMIZERS):
    world = draw(st.integers(1, 16))
    per_dev = draw(st.integers(1, 128))
    return ReferenceHyp(
        world_size=world,
        batch=world * per_dev,
        nbs=draw(st.integers(1, 512)),
        optimizer=draw(st.sampled_from(optimizers)),
        lr0=draw(st.floats(1e-6, 1e-3)),
        momentum=draw(st.floats(0.5, 0.99)),
        weight_decay=draw(st.floats(0.0, 1e-3)),
        warmup_epochs=draw(st.sampled_from([0.0, 0.5, 1.0, 3.0, 5.0, 7.5])),
        warmup_bias_lr=draw(st.floats(0.0, 0.1)),
        epochs=draw(st.integers(1, 300)),
        dataset_size=draw(st.one_of(st.none(), st.integers(1, 200_000))),
    )


def device_spec(kind: str, n: int):
    if kind == "cuda":
        return parse_devices(str(n))
    return parse_devices(f"{kind}:{n}")


@st.composite
def targets(draw):
    kind = draw(st.sampled_from(["cuda", "cpu", "tpu"]))
    n = draw(st.integers(1, 64)) if kind != "tpu" else draw(st.sampled_from([1, 4, 8, 16, 32]))
    spec = device_spec(kind, n)
    mode = draw(st.sampled_from(["keep", "total", "per_device"]))
    b = draw(st.integers(1, 128))
    max_b = draw(st.one_of(st.none(), st.integers(1, 128)))
    if mode == "total":
        return TargetHardware(spec, batch=b * spec.world_size, max_batch_per_device=max_b)
    if mode == "per_device":
        return TargetHardware(spec, batch_per_device=b, max_batch_per_device=max_b)
    return TargetHardware(spec, max_batch_per_device=max_b)


def run(ref, target, policy):
    """scale(), skipping only the documented refusal: a scaled lr0/weight_decay outside [0, 1]."""
    try:
        return scale(ref, target, policy)
    except ScalingError as e:
        assert all("outside [0, 1]" in p for p in e.problems), e.problems
        assume(False)


def requested_total(ref: ReferenceHyp, target: TargetHardware) -> int:
    w = target.devices.world_size
    if target.batch is not None:
        return target.batch
    if target.batch_per_device is not None:
        return target.batch_per_device * w
    return ref.batch // ref.world_size * w


def ref_images(ref: ReferenceHyp) -> int:
    return ref.batch * um.accumulate(ref.nbs, ref.batch)


# ------------------------------------------------------------------------------------------


@SETTINGS
@given(ref=references(), policy=st.sampled_from(["auto", "linear", "sqrt", "table", "none"]), as_cpu=st.booleans())
def test_identity_when_target_equals_reference(ref, policy, as_cpu):
    spec = parse_devices(f"cpu:{ref.world_size}" if as_cpu else str(ref.world_size))
    r = scale(ref, TargetHardware(spec), policy)
    for key in KEYS:
        assert r.passed[key] == getattr(ref, key), key
    assert r.reasons == []
    assert r.k == 1.0
    assert r.effective == r.reference_effective


def mean_gradient_step(lr0: float, optimizer: str, images: int) -> float:
    """lr0 in mean-gradient terms: Ultralytics' loss is a sum over the images of a step, so an SGD-family
    step is lr0 x images x the mean gradient; an Adam-family step ignores the gradient's scale."""
    return lr0 * (images if optimizer in um.SGD_FAMILY else 1)


# What docs/scaling.md section 3 says each k-rule keeps: the mean-gradient step grows x k**p
MEAN_STEP_EXPONENT = {"linear": {"SGD": 1.0, "Adam": 1.0}, "sqrt": {"SGD": 0.5, "Adam": 0.5},
                      "lr0-sqrt": {"SGD": 1.5, "Adam": 0.5}}


def step_exponent(policy: str, family: str, optimizer: str, ref: ReferenceHyp, target: TargetHardware,
                  k: float) -> float:
    """MEAN_STEP_EXPONENT of the policy; auto's is that of the rule its decision table names for the job's
    task, start, family (or MuSGD's own key, 7J) and k (docs/scaling.md 7I), whatever the device."""
    if policy == "auto":
        policy = evidence.decision(ref.task, ref.start, family, k, optimizer).arm.label
    return MEAN_STEP_EXPONENT[policy][family]


@SETTINGS
@given(ref=references(), target=targets(), policy=st.sampled_from(["auto", "linear", "sqrt"]))
@example(ref=ReferenceHyp(optimizer="SGD", batch=8, nbs=8), target=TargetHardware(parse_devices("cpu"), batch=64),
         policy="auto")  # the decided rule at k = 8, every run
def test_k_rules_keep_what_the_docs_say_per_family(ref, target, policy):
    r = run(ref, target, policy)
    images = r.passed["batch"] * max(round(r.passed["nbs"] / r.passed["batch"]), 1)
    images_ref = ref_images(ref)
    assert r.k == pytest.approx(images / images_ref, rel=REL)
    family = "SGD" if r.passed["optimizer"] in um.SGD_FAMILY else "Adam"
    # the mean-gradient step
    opt = r.passed["optimizer"]
    ratio = mean_gradient_step(r.passed["lr0"], opt, images) / mean_gradient_step(ref.lr0, opt, images_ref)
    assert ratio == pytest.approx(r.k ** step_exponent(policy, family, opt, ref, target, r.k), rel=REL)
    # the weight decay per epoch: optimizer steps (1/images) x lr0 x the optimizer's weight decay
    wd_ref = ref.weight_decay * images_ref / ref.nbs
    per_epoch = r.passed["lr0"] * r.effective["weight_decay"] / images
    assert per_epoch == pytest.approx(ref.lr0 * wd_ref / images_ref, rel=1e-7, abs=1e-30)


@SETTINGS
@given(ref=references(), target=targets(), policy=st.sampled_from(["auto", "linear", "sqrt", "table", "none"]))
def test_images_per_step_as_planned(ref, target, policy):
    r = run(ref, target, policy)
    w = target.devices.world_size
    b, nbs = r.passed["batch"], r.passed["nbs"]
    acc = max(round(nbs / b), 1)
    planned_total = requested_total(ref, target)
    assert b % w == 0
    if target.max_batch_per_device is not None:
        assert b // w <= target.max_batch_per_device
    x_ref = ref_images(ref)
    if policy in ("table", "none"):
        planned = planned_total * um.accumulate(ref.nbs, planned_total)  # stock Ultralytics with the ref nbs
    elif x_ref % planned_total == 0:
        planned = x_ref  # the reference's images per step, held by accumulation
    else:
        m = max(x_ref // planned_total, 1)
        candidates = [m * planned_total, (m + 1) * planned_total]
        best = min(abs(c - x_ref) for c in candidates)
        planned = b * acc
        assert planned in candidates and abs(planned - x_ref) == best
    assert b * acc == planned
    assert planned % planned_total == 0  # a multiple of the requested total batch
    if not ref.dataset_size:
        assert r.effective["images_per_step"] == planned == b * r.effective["accumulate"]
    if policy in ("auto", "linear", "sqrt"):
        assert r.k == pytest.approx(planned / x_ref, rel=REL)


@SETTINGS
@given(
    ref=references(optimizers=(*um.OPTIMIZERS, "auto", "sgd", "adamw")),
    nc=st.one_of(st.none(), st.integers(1, 100)),
    target=targets(),
    policy=st.sampled_from(["auto", "linear", "sqrt", "table", "none"]),
)
def test_every_changed_value_has_a_reason_and_optimizer_is_pinned(ref, nc, target, policy):
    ref = ReferenceHyp(**{**ref.__dict__, "nc": nc})
    r = run(ref, target, policy)
    assert set(KEYS) <= set(r.passed)
    assert r.passed["optimizer"] in um.OPTIMIZERS
    for key, value in r.passed.items():
        if not hasattr(ref, key) or getattr(ref, key) != value:
            lines = [x for x in r.reasons if x.startswith(f"{key} ")]
            assert len(lines) == 1, (key, r.reasons)
    # effective is Ultralytics' maths on `passed` alone
    assert r.effective == effective_values(r.passed, target.devices.world_size, ref.epochs, ref.dataset_size,
                                           target.devices.kind, warmup_momentum=ref.warmup_momentum)


def _num(text: str) -> float:
    return float(text.rstrip(",;:)"))


@SETTINGS
@given(ref=references(), target=targets(), policy=st.sampled_from(["auto", "linear", "sqrt", "table", "none"]))
def test_every_reason_states_the_value_it_explains(ref, target, policy):
    """Each reason names a passed key with the reference's value and the passed one ("key a -> b") or
    says it was kept ("key a kept"); every number it quotes about lr0 and weight decay is the value
    the result holds (4 significant digits, as printed)."""
    r = run(ref, target, policy)
    images = r.passed["batch"] * max(round(r.passed["nbs"] / r.passed["batch"]), 1)
    images_ref = ref_images(ref)
    opt = r.passed["optimizer"]
    for line in r.reasons:
        key, old, rest = line.split(" ", 2)
        assert key in KEYS, line
        value = getattr(ref, key)
        assert old == (f"{value:.6g}" if isinstance(value, float) else str(value)), line
        if rest.startswith("kept: "):
            assert r.passed[key] == getattr(ref, key), line
        else:
            new = rest.split(": ", 1)[0].removeprefix("-> ")
            shown = r.passed[key]
            assert new == (f"{shown:.6g}" if isinstance(shown, float) else str(shown)), line
        if key == "lr0":
            if m := re.search(r"so lr0 x (\S+)", line):
                assert _num(m.group(1)) == pytest.approx(r.passed["lr0"] / ref.lr0, rel=1e-3), line
            if m := re.search(r"step x (\S+)(?: =| in)", line):
                want = mean_gradient_step(r.passed["lr0"], opt, images) / mean_gradient_step(ref.lr0, opt, images_ref)
                assert _num(m.group(1)) == pytest.approx(want, rel=1e-3), line
        if key == "weight_decay":
            if m := re.search(r"weight decay (\S+) -> (\S+);", line):
                assert _num(m.group(2)) == pytest.approx(r.effective["weight_decay"], rel=1e-5), line
            if m := re.search(r"Ultralytics applies (\S+) ", line):
                assert _num(m.group(1)) == pytest.approx(r.effective["weight_decay"], rel=1e-5), line
