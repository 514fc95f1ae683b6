"""The library proof at world size 2: in each rank of a real 2-process gloo run (`--devices cpu:2`), the
trainer Ultralytics built applies exactly the scaler's `effective` values: batch per device,
accumulate, the optimizer and its param groups' weight decay and lr, warmup iterations, samples and
batches per device, and the loss scaling (loss x per-device batch x world size, which DDP averages).

Also: BatchNorm weights stay out of weight decay, and BatchNorm momentum is scaled so that the running
statistics follow the same number of epochs as at the reference (docs/distributed.md, Parity).

The worker records what the trainer applied when YOLO_ORCH_PROBE_DIR is set
(tests/helpers/rank_probe.py, loaded by name in every rank). Extends tests/e2e/test_scaler_vs_ultralytics.py (world size 1)."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from conftest import TINY_JOB, run_cli, write_job

pytestmark = pytest.mark.slow

CASES = {
    # the reference's per-device batch kept: 4 per device x 2, accumulation holds 64 images per step
    "keep-images-per-step": dict(images=32, reference={"devices": 1, "batch": 4}, target={"devices": "cpu:2"}),
    # more images per step than the reference (16 -> 32): the sqrt rule for AdamW (lr0 and the optimizer's
    # weight decay x sqrt(2): both rescaled), nbs raised
    "sqrt-rescale": dict(images=64, reference={"devices": 1, "batch": 16, "nbs": 16},
                         target={"devices": "cpu:2", "batch_per_device": 16}, scaling={"policy": "sqrt"}),
    # fewer images per rank than its batch: 8 images on 2 ranks of 16 give batches of 4 (plan = trainer)
    "small-dataset": dict(images=8, reference={"devices": 1, "batch": 16}, target={"devices": "cpu:2"}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def ddp_case(request, tmp_path_factory):
    case = CASES[request.param]
    tmp = tmp_path_factory.mktemp(request.param)
    data = {"synth": {**TINY_JOB["data"]["synth"], "images": case["images"]}}
    job = write_job(tmp, epochs=2, data=data, reference=case["reference"], target=case["target"],
                    scaling=case.get("scaling", {"policy": "auto"}))
    probe = tmp / "probe"
    result = run_cli("submit", job, "--json", cwd=tmp, env={"YOLO_ORCH_PROBE_DIR": str(probe)})
    assert result.returncode == 0, result.stderr[-3000:]
    run_dir = next((tmp / "runs" / "tiny").iterdir())
    scaling = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())["plan"]["scaling"]
    probes = [json.loads((probe / f"probe-rank{r}.json").read_text()) for r in (0, 1)]
    return request.param, scaling, probes


def test_every_rank_applies_the_scalers_effective_values(ddp_case):
    name, scaling, probes = ddp_case
    eff = scaling["effective"]
    assert eff["world_size"] == 2
    for p in probes:
        assert p["world_size"] == eff["world_size"]
        assert p["batch"] == eff["batch"]
        # the loader's batch: Ultralytics' batch // world size, capped at the dataset by build_dataloader
        assert p["batch_per_device"] == min(eff["batch_per_device"], eff["dataset_size"])
        assert p["nbs"] == eff["nbs"]
        assert p["accumulate"] == eff["accumulate"]
        real_batch = min(p["batch_per_device"], p["samples_per_device"])  # a rank's sampler may hold fewer
        assert real_batch * p["world_size"] * p["accumulate"] == eff["images_per_step"]
        assert p["optimizer"] == eff["optimizer"]
        weight = next(g for g in p["param_groups"] if g["param_group"] == "weight")
        assert math.isclose(weight["weight_decay"], eff["weight_decay"], rel_tol=1e-9), (name, weight, eff)
        for g in p["param_groups"]:
            assert math.isclose(g["lr"], eff["lr0"], rel_tol=1e-9), (name, g, eff["lr0"])
            if g["param_group"] != "weight":
                assert g["weight_decay"] == 0.0
        # BatchNorm running statistics keep their time constant in epochs: momentum 1-(1-0.03)^k, k = reference
        # batches per epoch / this rank's; the EMA (the saved model) keeps Ultralytics' 0.03
        k = scaling["reference_effective"]["batches_per_epoch"] / eff["batches_per_epoch"]
        assert len(p["bn_momentum"]) == 1 and math.isclose(p["bn_momentum"][0], 1 - 0.97 ** k, rel_tol=1e-9), (k, p)
        assert p["ema_bn_momentum"] == [0.03]
        # BatchNorm weights stay out of weight decay, as in one process (one weight per norm layer)
        bn = next(g for g in p["param_groups"] if g["param_group"] == "bn")
        assert p["norm_layers"] > 0 and bn["params"] == p["norm_layers"], (bn, p["norm_layers"])
        assert p["warmup_iterations"] == eff["warmup_iterations"]
        assert p["samples_per_device"] == eff["samples_per_device"]
        assert p["batches_per_epoch"] == eff["batches_per_epoch"]
        assert p["dataset_size"] == eff["dataset_size"]
        # Ultralytics multiplies the loss by the images of the rank's batch (criterion) and the world size
        # (trainer): so loss_scale / world size is the images a real batch held, and the images per
        # optimizer step the plan states are those the trainer really steps with
        images = round(p["loss_scale"] / eff["world_size"])
        assert math.isclose(p["loss_scale"], images * eff["world_size"], rel_tol=1e-4)
        assert images * eff["world_size"] * p["accumulate"] == eff["images_per_step"], (name, images, eff)


def test_the_cases_exercise_the_scaler(ddp_case):
    """Guard against a vacuous proof: accumulation, warmup and (in one case) lr/wd rescaling are real."""
    name, scaling, _ = ddp_case
    eff, ref = scaling["effective"], scaling["reference_effective"]
    assert eff["warmup_iterations"] > 0
    if name == "small-dataset":
        assert eff["batch_per_device"] == 16 and eff["samples_per_device"] == 4
        assert eff["images_per_step"] == 4 * 2 * eff["accumulate"]
    elif name == "keep-images-per-step":
        assert eff["accumulate"] == 8 and eff["images_per_step"] == ref["images_per_step"] == 64
        assert eff["lr0"] == ref["lr0"]
    else:
        assert eff["images_per_step"] == 2 * ref["images_per_step"] == 32 and eff["nbs"] == 32
        assert math.isclose(eff["lr0"], ref["lr0"] * math.sqrt(2), rel_tol=1e-9)
        assert math.isclose(eff["weight_decay"], ref["weight_decay"] * math.sqrt(2), rel_tol=1e-9)
