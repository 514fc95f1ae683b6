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
from orchestrator.spec import ultralytics_cfg


@pytest.mark.parametrize("version, picks, differences", [
    ("8.3.196", ("SGD", "AdamW"), 3), ("8.3.253", ("SGD", "AdamW"), 3), ("8.4.0", ("SGD", "MuSGD"), 3),
    ("8.4.7", ("SGD", "MuSGD"), 3), ("8.4.8", ("MuSGD", "AdamW"), 3), ("8.4.102", ("MuSGD", "AdamW"), 3),
    ("8.4.103", ("MuSGD", "AdamW"), 2), ("8.4.177", ("MuSGD", "AdamW"), 1), ("8.4.183", ("MuSGD", "AdamW"), 0),
    ("8.4.190", ("MuSGD", "AdamW"), 0),
])
def test_each_release_range_has_its_formulas(version, picks, differences):
    assert releases.auto_picks(version) == picks
    assert len(releases.differences(version)) == differences
    assert releases.refusal(version) is None


def test_releases_that_cannot_run_are_refused_in_one_line():
    assert "needs 8.3.196 or later (it imports unwrap_model" in releases.refusal("8.3.0")
    assert "accepts >=8.3.196,<8.5" in releases.refusal("8.5.0")
    assert "MuSGD came with Ultralytics 8.4.0" in releases.refusal("8.3.250", "MuSGD")
    assert releases.refusal("8.4.0", "MuSGD") is None


def test_the_declared_range_is_the_one_the_plan_enforces():
    text = (REPO / "pyproject.toml").read_text()
    assert re.search(r'"ultralytics([^"]+)"', text).group(1) == releases.ACCEPTED


def test_the_installed_release_is_the_modelled_one():
    """The pin's trainer holds every change's new form: a new pin that drops one fails here first."""
    trainer = (ultralytics_cfg.package_dir() / "engine" / "trainer.py").read_text()
    assert releases.parse(ultralytics_cfg.version()) >= releases.MODELLED
    for change in releases.CHANGES:
        assert change.marker in trainer, change.since


def _plan(tmp_path, monkeypatch, version: str, **job):
    from orchestrator.plan import make_plan
    from orchestrator.spec.loader import load_job

    monkeypatch.setattr(ultralytics_cfg, "version", lambda: version)
    return make_plan(load_job(write_job(tmp_path, **job)))


def test_an_older_release_is_planned_with_its_own_auto_pick_and_says_what_differs(tmp_path, monkeypatch):
    job = {"hyp": {"optimizer": "auto"}, "epochs": 100,
           "data": {"synth": {"images": 2000, "val_images": 8, "classes": 2, "imgsz": 64}}, "reference": {"batch": 16}}
    # ceil(2000/64) * 100 = 3200 iterations: at or below 10,000
    plan = _plan(tmp_path, monkeypatch, "8.4.5", **job)
    assert plan.train_args["optimizer"] == "MuSGD" and plan.ultralytics == "8.4.5"  # 8.4.0-8.4.7: MuSGD below
    assert any("warmup lasts at least 100 iterations" in w for w in plan.warnings)
    job["epochs"] = 400  # 12,800 iterations: above
    assert _plan(tmp_path, monkeypatch, "8.3.240", **job).train_args["optimizer"] == "SGD"  # 8.3 has no MuSGD
    assert _plan(tmp_path, monkeypatch, "8.4.190", **job).train_args["optimizer"] == "MuSGD"
    assert _plan(tmp_path, monkeypatch, "8.4.190", **job).warnings == [
        w for w in _plan(tmp_path, monkeypatch, "8.4.190", **job).warnings if "Ultralytics 8.4.190 (before" not in w]


def test_a_release_that_cannot_run_is_exit_2_at_plan_time(tmp_path, monkeypatch):
    from orchestrator.spec.errors import SpecError

    with pytest.raises(SpecError, match="ultralytics 8.3.0 is installed; yolo-orch's training process needs 8.3.196"):
        _plan(tmp_path, monkeypatch, "8.3.0")
    with pytest.raises(SpecError, match="hyp.optimizer: MuSGD came with Ultralytics 8.4.0"):
        _plan(tmp_path, monkeypatch, "8.3.250", hyp={"optimizer": "MuSGD"})
    assert not (Path(tmp_path) / "runs").exists()
