"""Declared range = tested range: on each Ultralytics release of the matrix (the first and last accepted of
each series, and the releases on either side of every formula change in orchestrator/scaling/releases.py),
installed with --no-deps into its own folder beside the pinned torch and put on PYTHONPATH, the plan
equals what the release's real trainer applies over its first steps (batches, the optimizer, weight decay
per group, accumulate and every group's lr through warmup, the warmup's length, optimizer=auto's pick on
both sides of 10,000 iterations), and a short training through `submit` finishes. The wheels come from
PyPI into the test cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, TINY_JOB, cli_env, run_cli, write_job

from orchestrator.scaling import releases

pytestmark = pytest.mark.slow
MATRIX = ("8.3.200", "8.3.253", "8.4.0", "8.4.2", "8.4.3", "8.4.7", "8.4.8", "8.4.102", "8.4.103", "8.4.176", "8.4.177", "8.4.182",
          "8.4.183", "8.4.190")
PROBE = REPO / "tests" / "helpers" / "release_probe.py"


def _installed(version: str) -> Path:
    root = Path(os.environ.get("YOLO_ORCH_CACHE", Path.home() / ".cache" / "yolo-orch")) / "ultralytics-releases"
    target = root / version
    if not (target / "ultralytics" / "__init__.py").is_file():
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                            f"ultralytics=={version}"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"cannot install ultralytics {version} in CI: {r.stderr.strip()[-300:]}")
            pytest.skip(f"no package index here: {r.stderr.strip()[-200:]}")
        # the wheel carries Ultralytics' own `tests` package, which would shadow this repository's on the path
        shutil.rmtree(target / "tests", ignore_errors=True)
    return target


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    from orchestrator.data.synth import generate_dataset

    tmp = tmp_path_factory.mktemp("matrix")
    data = generate_dataset(tmp / "data", images=8, val_images=4, classes=2, imgsz=64, seed=0)
    # 2 batches of 4 an epoch, 2 epochs: nbs 64 makes accumulate 16, capped at 4 from 8.4.177 (the cap binds);
    # warmup_epochs 3: capped at epochs - 1 = 1 epoch (2 steps) from 8.4.103, at least 100 steps before
    return write_job(tmp, {**TINY_JOB, "data": str(data), "epochs": 2,
                           "hyp": {"optimizer": "SGD", "lr0": 0.01, "warmup_epochs": 3.0, "warmup_bias_lr": 0.1},
                           "reference": {"devices": "cpu", "batch": 4, "nbs": 64}, "target": {"devices": "cpu"},
                           "overrides": {"workers": 0, "plots": False, "val": False}})


def _plan(job: Path, env: dict, *sets: str) -> dict:
    args = [a for s in sets for a in ("--set", s)]
    r = run_cli("submit", job, "--dry-run", "--json", *args, cwd=job.parent, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _expected_steps(eff: dict, version: str, probe: dict) -> None:
    """Every recorded step against the release's warmup (releases.CHANGES), fed with the plan's values: which
    steps warm up (`ni <= nw`, `ni < nw` in 8.4.103-8.4.182), where accumulate's ramp ends (the capped
    accumulate from 8.4.183, nbs / batch before), which group's lr starts at warmup_bias_lr (the group named
    bias from 8.4.3, the first before); after warmup accumulate stays where the ramp left it."""
    f, release = releases.formulas_for(version), releases.parse(version)
    nw, wbl = eff["warmup_iterations"], eff["warmup_bias_lr"]
    target = eff["accumulate"] if f.ramp_to_capped else eff["nbs"] / eff["batch"]
    accumulate = eff["accumulate"]  # as set up, before any warmup step
    for ni, step in enumerate(probe["steps"]):
        if nw and (ni <= nw if f.warmup_last_step else ni < nw):
            accumulate = max(1, int(np.interp(ni, [0, nw], [1, target]).round()))
            for j, (lr, lr0) in enumerate(zip(step["lr"], step["initial_lr"])):
                bias = probe["group_names"][j] == "bias" if release >= (8, 4, 3) else j == 0
                assert lr == pytest.approx(np.interp(ni, [0, nw], [wbl if bias else 0.0, lr0 * step["lf"]])), (ni, j)
        else:
            assert all(lr == pytest.approx(lr0 * step["lf"]) for lr, lr0 in zip(step["lr"], step["initial_lr"])), ni
        assert step["accumulate"] == accumulate, (ni, step)
    assert eff["accumulate_after_warmup"] == accumulate  # the plan says where the run's accumulate ends


@pytest.mark.parametrize("version", MATRIX)
def test_the_plan_is_what_the_release_applies_and_a_training_finishes(version, job, tmp_path):
    env = cli_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(_installed(version))])})
    plan = _plan(job, env)
    assert plan["ultralytics"] == version
    eff, formulas = plan["scaling"]["effective"], releases.formulas_for(version)
    above, below = _plan(job, env, "hyp.optimizer=auto", "epochs=10001"), _plan(job, env, "hyp.optimizer=auto")
    train = {**plan["train_args"], "project": str(tmp_path), "name": "probe", "exist_ok": True, "amp": False,
             "verbose": False}
    auto = [{**train, "optimizer": "auto", "epochs": epochs, "name": f"auto{epochs}"} for epochs in (10001, 2)]
    r = subprocess.run([sys.executable, str(PROBE), json.dumps({"train": train, "auto": auto[0]})], env=env,
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    probe = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("PROBE "))[6:])
    assert probe["version"] == version and probe["file"].startswith(str(_installed(version)))
    steps = probe["train"]
    assert steps["batches"] == eff["batches_per_epoch"] and steps["optimizer"] == eff["optimizer"]
    assert max(steps["weight_decay"]) == pytest.approx(eff["weight_decay"]) and min(steps["weight_decay"]) == 0
    assert all(lr0 == pytest.approx(eff["lr0"]) for lr0 in steps["steps"][0]["initial_lr"])
    _expected_steps(eff, version, steps)
    assert probe["auto"]["optimizer"] == above["train_args"]["optimizer"] == formulas.auto_picks[0]
    assert below["train_args"]["optimizer"] == formulas.auto_picks[1]

    r = run_cli("submit", job, "--json", "--set", "name=matrix", cwd=job.parent, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 2
    env_json = json.loads((Path(out["run_dir"]) / "env.json").read_text())
    assert env_json["ultralytics"] == version  # the training process ran the release of the matrix
