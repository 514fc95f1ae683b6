"""The Ultralytics releases yolo-orch accepts (orchestrator/scaling/releases.py): the plan refuses what
cannot run, models each release's optimizer=auto, warns where a release applies other formulas, and
names the release it modelled. The boundaries themselves are checked on the releases' own source in
tests/e2e/test_releases_source.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import REPO, write_job

from orchestrator.scaling import releases
from orchestrator.jobspec import ultralytics_cfg
from orchestrator.errors import UserError


@pytest.mark.parametrize("version, picks, floor, capped_warmup, last_step, capped_accumulate, ramp", [
    ("8.3.200", ("SGD", "AdamW"), 100, False, True, False, False),
    ("8.3.253", ("SGD", "AdamW"), 100, False, True, False, False),
    ("8.4.0", ("SGD", "MuSGD"), 100, False, True, False, False), ("8.4.2", ("SGD", "MuSGD"), 100, False, True, False, False),
    ("8.4.3", ("MuSGD", "MuSGD"), 100, False, True, False, False),
    ("8.4.7", ("MuSGD", "MuSGD"), 100, False, True, False, False),
    ("8.4.8", ("MuSGD", "AdamW"), 100, False, True, False, False),
    ("8.4.102", ("MuSGD", "AdamW"), 100, False, True, False, False),
    ("8.4.103", ("MuSGD", "AdamW"), 0, True, False, False, False),
    ("8.4.177", ("MuSGD", "AdamW"), 0, True, False, True, False),
    ("8.4.183", ("MuSGD", "AdamW"), 0, True, True, True, True), ("8.4.190", ("MuSGD", "AdamW"), 0, True, True, True, True),
])
def test_each_release_range_has_its_formulas(version, picks, floor, capped_warmup, last_step, capped_accumulate, ramp):
    f = releases.formulas_for(version)
    assert (f.auto_picks, f.warmup_floor, f.warmup_capped, f.warmup_last_step, f.accumulate_capped,
            f.ramp_to_capped) == (picks, floor, capped_warmup, last_step, capped_accumulate, ramp)
    assert releases.refusal(version) is None


def test_where_warmup_leaves_accumulate_in_each_release():
    from orchestrator.scaling import ultralytics_math as um

    # nbs 64, batch 4: 16 nominal; 2 batches an epoch, 2 epochs (4 steps)
    new, mid, old = (releases.formulas_for(v) for v in ("8.4.190", "8.4.150", "8.4.102"))
    assert um.accumulate_after_warmup(64, 4, 4, 2, 4, new.warmup_last_step, new.ramp_to_capped) == 4  # lands on acc0
    assert um.accumulate_after_warmup(64, 4, 4, 2, 4, mid.warmup_last_step, mid.ramp_to_capped) == 8  # one step short
    assert um.accumulate_after_warmup(64, 4, 16, 100, 4, old.warmup_last_step, old.ramp_to_capped) == 1  # 100 > 4 steps
    assert um.accumulate_after_warmup(64, 4, 16, 100, 1000, old.warmup_last_step, old.ramp_to_capped) == 16
    assert um.accumulate_after_warmup(64, 4, 16, 0, 1000) == 16  # no warmup: as set up


def test_the_warmup_formulas_of_each_side_of_8_4_103():
    from orchestrator.scaling import ultralytics_math as um

    old, new = releases.formulas_for("8.4.102"), releases.formulas_for("8.4.103")
    assert um.warmup_iterations(3.0, 35, 8, old.warmup_floor, old.warmup_capped) == 100  # the quickstart: 24 -> 100
    assert um.warmup_iterations(3.0, 35, 8, new.warmup_floor, new.warmup_capped) == 24
    assert um.warmup_iterations(3.0, 2, 8, old.warmup_floor, old.warmup_capped) == 100  # no epochs - 1 cap
    assert um.warmup_iterations(3.0, 2, 8, new.warmup_floor, new.warmup_capped) == 8
    assert um.warmup_iterations(0.0, 35, 8, old.warmup_floor, old.warmup_capped) == 0  # -1 there: no warmup
    assert um.capped_accumulate(8, 1, 2, old.accumulate_capped) == 8 and um.capped_accumulate(8, 1, 2) == 2


def test_releases_that_cannot_run_are_refused_in_one_line():
    assert "needs 8.3.200 or later (it hooks into the trainer" in releases.refusal("8.3.0")
    assert "accepts >=8.3.200,<8.5" in releases.refusal("8.5.0")
    assert "MuSGD came with Ultralytics 8.4.0" in releases.refusal("8.3.250", "MuSGD")
    first_xla = releases.text(releases.LAUNCHER_MINIMUM["xla"][0])
    assert f"target.devices: tpu:8 needs Ultralytics {first_xla} or later" in releases.refusal("8.4.100", None, "xla",
                                                                                               "tpu:8")
    assert releases.refusal(first_xla, None, "xla", "tpu:8") is None
    assert releases.refusal("8.3.200", None, "local", "cpu") is None
    assert releases.refusal("8.4.0", "MuSGD") is None
    assert releases.refusal("8.3.199") is not None and releases.refusal("8.3.200") is None



def test_a_task_or_model_family_newer_than_the_installed_release_is_refused_in_one_line():
    assert releases.refusal("8.4.51", task="semantic") == (
        "task: semantic came with Ultralytics 8.4.52; the installed 8.4.51 does not train it: "
        "pip install 'ultralytics>=8.4.52,<8.5'")
    assert releases.refusal("8.4.52", task="semantic") is None
    assert "task: depth came with Ultralytics 8.4.104" in releases.refusal("8.4.103", task="depth")
    assert releases.refusal("8.4.104", task="depth") is None
    assert releases.refusal("8.3.200", task="pose") is None
    assert "model: YOLO26 models came with Ultralytics 8.4.0; the installed 8.3.250 cannot build yolo26n.yaml" in \
        releases.refusal("8.3.250", model="yolo26n.yaml")
    assert releases.refusal("8.3.250", model="/work/models/my-yolo11n.yaml") is None
    assert releases.refusal("8.4.0", model="/work/yolo26n-seg.yaml") is None


def test_a_release_newer_than_the_tested_ones_plans_with_a_warning_naming_the_check(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "8.4.191")
    assert plan.ultralytics == "8.4.191"
    assert any("Ultralytics 8.4.191 is newer than the newest release yolo-orch tests (8.4.190)" in w and
               "yolo-orch doctor --verify-plan JOB" in w for w in plan.warnings)
    assert not [w for w in _plan(tmp_path, monkeypatch, "8.4.190").warnings if "newer than" in w]


def test_the_declared_range_is_the_one_the_plan_enforces():
    text = (REPO / "pyproject.toml").read_text()
    assert re.search(r'"ultralytics([^"]+)"', text).group(1) == releases.ACCEPTED


def test_the_installed_release_is_the_modelled_one():
    """The pin's trainer holds every change's new form: a new pin that drops one fails here first."""
    trainer = (ultralytics_cfg.package_dir() / "engine" / "trainer.py").read_text()
    assert releases.parse(ultralytics_cfg.version()) == releases.NEWEST
    for change in releases.CHANGES:
        assert change.marker in trainer, change.since


def _plan(tmp_path, monkeypatch, version: str, **job):
    from orchestrator.plan import make_plan
    from orchestrator.jobspec.loader import load_job

    monkeypatch.setattr(ultralytics_cfg, "version", lambda: version)
    return make_plan(load_job(write_job(tmp_path, **job)))


def test_an_older_release_is_planned_with_its_own_auto_pick_and_says_what_differs(tmp_path, monkeypatch):
    job = {"hyp": {"optimizer": "auto"}, "epochs": 100,
           "data": {"synth": {"images": 2000, "val_images": 8, "classes": 2, "imgsz": 64}}, "reference": {"batch": 16}}
    # ceil(2000/64) * 100 = 3200 iterations: at or below 10,000
    plan = _plan(tmp_path, monkeypatch, "8.4.2", **job)
    assert plan.train_args["optimizer"] == "MuSGD" and plan.ultralytics == "8.4.2"  # 8.4.0-8.4.2: MuSGD below
    assert plan.scaled.effective["warmup_iterations"] == 3 * 125  # 2000 images / 16 = 125 batches
    assert _plan(tmp_path, monkeypatch, "8.4.2", **{**job, "epochs": 2, "hyp": {"optimizer": "SGD",
                                                                                "warmup_epochs": 0.5}},
                 ).scaled.effective["warmup_iterations"] == 100  # round(0.5 * 125) = 62 -> at least 100
    job["epochs"] = 400  # 12,800 iterations: above
    assert _plan(tmp_path, monkeypatch, "8.3.240", **job).train_args["optimizer"] == "SGD"  # 8.3 has no MuSGD
    assert _plan(tmp_path, monkeypatch, "8.4.190", **job).train_args["optimizer"] == "MuSGD"
    assert _plan(tmp_path, monkeypatch, "8.4.5", **job).train_args["optimizer"] == "MuSGD"  # 8.4.3-8.4.7: MuSGD
    assert not [w for w in _plan(tmp_path, monkeypatch, "8.4.190", **job).warnings if "after warmup" in w]


def test_where_warmup_leaves_accumulate_is_said_when_it_is_not_the_plans(tmp_path, monkeypatch):
    tiny = {"data": {"synth": {"images": 8, "val_images": 4, "classes": 2, "imgsz": 64}}, "epochs": 2,
            "reference": {"batch": 4, "nbs": 64}, "target": {"devices": "cpu", "batch": 4},
            "hyp": {"optimizer": "SGD", "warmup_epochs": 3.0}}
    plan = _plan(tmp_path, monkeypatch, "8.4.150", **tiny)  # 2 batches an epoch, 2 epochs, nw 2: 16 stops at 8
    assert (plan.scaled.effective["accumulate"], plan.scaled.effective["accumulate_after_warmup"]) == (16, 8)
    assert any(w.startswith("accumulate 16 -> 8 after warmup: Ultralytics 8.4.150's warmup") for w in plan.warnings)
    assert not any("after warmup" in w for w in _plan(tmp_path, monkeypatch, "8.4.190", **tiny).warnings)
    assert _plan(tmp_path, monkeypatch, "8.4.170", **tiny).scaled.effective["accumulate"] == 16  # no cap then


def test_a_release_that_cannot_run_is_exit_2_at_plan_time(tmp_path, monkeypatch):

    with pytest.raises(UserError, match="ultralytics 8.3.0 is installed; yolo-orch's training process needs 8.3.200"):
        _plan(tmp_path, monkeypatch, "8.3.0")
    with pytest.raises(UserError, match="hyp.optimizer: MuSGD came with Ultralytics 8.4.0"):
        _plan(tmp_path, monkeypatch, "8.3.250", hyp={"optimizer": "MuSGD"})
    assert not (Path(tmp_path) / "runs").exists()


def test_momentum_after_warmup_is_modelled_and_said_where_a_release_never_reaches_it(tmp_path, monkeypatch):
    """8.4.103-8.4.182 end warmup at `ni < nw`: with 2 batches an epoch and 1 warmup epoch (nw 2) SGD's
    momentum stops halfway from warmup_momentum 0.8 to 0.937 and stays 0.8685 for the whole run (measured
    on 8.4.150's trainer, issue #47); 8.4.190 lands on it. AdamW's groups have no momentum to ramp."""
    job = {"data": {"synth": {"images": 8, "val_images": 4, "classes": 2, "imgsz": 64}}, "epochs": 3,
           "reference": {"batch": 4, "nbs": 4}, "target": {"devices": "cpu", "batch": 4},
           "hyp": {"optimizer": "SGD", "momentum": 0.937, "warmup_momentum": 0.8, "warmup_epochs": 1.0}}
    old = _plan(tmp_path, monkeypatch, "8.4.150", **job)
    assert old.scaled.effective["warmup_iterations"] == 2
    assert old.scaled.effective["momentum_after_warmup"] == pytest.approx(0.8685, abs=1e-12)
    said = [w for w in old.warnings if w.startswith("momentum 0.937 is never reached")]
    assert len(said) == 1 and "keeps momentum 0.8685" in said[0] and "8.4.183" in said[0], old.warnings
    new = _plan(tmp_path, monkeypatch, "8.4.190", **job)
    assert new.scaled.effective["momentum_after_warmup"] == 0.937
    assert not any("never reached" in w for w in new.warnings)
    adamw = _plan(tmp_path, monkeypatch, "8.4.150", **{**job, "hyp": {**job["hyp"], "optimizer": "AdamW"}})
    assert "momentum_after_warmup" not in adamw.scaled.effective


def test_optimizer_names_are_read_as_ultralytics_reads_them(tmp_path):
    """Ultralytics maps optimizer names case-insensitively (build_optimizer); the plan carries its spelling."""
    from orchestrator.jobspec.loader import load_job

    for given, canonical in (("sgd", "SGD"), ("adamw", "AdamW"), ("musgd", "MuSGD"), ("RMSProp", "RMSprop"),
                             ("rmsprop", "RMSprop"), ("Auto", "auto")):
        assert load_job(write_job(tmp_path, hyp={"optimizer": given})).spec.hyp.optimizer == canonical, given
    with pytest.raises(UserError, match=r"hyp.optimizer: must be .*'RMSprop' \(got 'nope'\)"):
        load_job(write_job(tmp_path, hyp={"optimizer": "nope"}))
