"""Declared range = tested range: on each Ultralytics release of the matrix (the first and last accepted of
each series, and the releases on either side of every formula change in orchestrator/scaling/releases.py),
installed with --no-deps into its own folder beside the pinned torch and put on PYTHONPATH, the plan
equals what the release's real trainer applies over its first steps (batches, the optimizer, weight decay
per group, accumulate and every group's lr through warmup, the warmup's length, optimizer=auto's pick on
both sides of 10,000 iterations); on the first and last release of each series a short training through
`submit` finishes. The wheels come from
PyPI into the test cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, TINY_JOB, cli_env, run_cli, write_job

from orchestrator.scaling import releases

pytestmark = pytest.mark.slow
MATRIX = ("8.3.200", "8.3.253", "8.4.0", "8.4.2", "8.4.3", "8.4.7", "8.4.8", "8.4.102", "8.4.103", "8.4.176", "8.4.177", "8.4.182",
          "8.4.183", "8.4.190")
# A training through `submit` on the first and last release of each series (the worker's hooks into the trainer
# at both ends); every release of the matrix has its plan compared with its real trainer, step by step.
# YOLO_ORCH_TRAIN_EVERY_RELEASE=1 trains on every release of the matrix too (by hand: about 1 minute more).
TRAINED = MATRIX if os.environ.get("YOLO_ORCH_TRAIN_EVERY_RELEASE") else ("8.3.200", "8.3.253", "8.4.0", "8.4.190")


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


@pytest.mark.parametrize("version", MATRIX)
def test_the_plan_is_what_the_release_applies_and_a_training_finishes(version, job, tmp_path):
    from orchestrator.doctor.checks import PASS
    from orchestrator.doctor.verify_plan import compare, run_probe

    env = cli_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(_installed(version))])})
    plan = _plan(job, env)
    assert plan["ultralytics"] == version
    eff, picks = plan["scaling"]["effective"], releases.formulas_for(version).auto_picks
    above, below = _plan(job, env, "hyp.optimizer=auto", "epochs=10001"), _plan(job, env, "hyp.optimizer=auto")
    assert (above["train_args"]["optimizer"], below["train_args"]["optimizer"]) == picks
    train = {**plan["train_args"], "project": str(tmp_path), "name": "probe", "exist_ok": True, "amp": False,
             "verbose": False}
    probe = run_probe({"train": train, "auto": {**train, "optimizer": "auto", "epochs": 10001, "name": "auto"}},
                      tmp_path, env)
    assert isinstance(probe, dict), probe
    assert probe["version"] == version and probe["file"].startswith(str(_installed(version)))
    checks = compare(eff, version, probe)  # step by step through warmup: doctor --verify-plan's comparison
    assert [c.name for c in checks if c.status != PASS] == [], [c for c in checks if c.status != PASS]
    assert len(checks) == 8  # ... and the momentum SGD keeps after warmup

    if version not in TRAINED:
        return
    r = run_cli("submit", job, "--json", "--set", "name=matrix", cwd=job.parent, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 2
    env_json = json.loads((Path(out["run_dir"]) / "env.json").read_text())
    assert env_json["ultralytics"] == version  # the training process ran the release of the matrix


def test_verify_plan_reports_a_match_on_the_pin_and_a_planted_mismatch(job, tmp_path):
    """A copy of the pinned release whose warmup is one step longer, as a new release might be: the plan
    (which models 8.4.190's formulas) and the trainer part, and doctor --verify-plan says where."""
    ok = run_cli("doctor", "--verify-plan", job, "--json", cwd=job.parent, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert all(c["status"] == "pass" for c in json.loads(ok.stdout)["checks"])
    import ultralytics

    planted = tmp_path / "planted"
    shutil.copytree(Path(ultralytics.__file__).parent, planted / "ultralytics")
    trainer = planted / "ultralytics" / "engine" / "trainer.py"
    text = trainer.read_text()
    old = "return round(warmup_epochs * num_batches) if warmup_epochs > 0 else 0"
    assert old in text
    trainer.write_text(text.replace(old, "return round(warmup_epochs * num_batches) + 1 if warmup_epochs > 0 else 0"))
    env = cli_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(planted)])})
    bad = run_cli("doctor", "--verify-plan", job, "--json", cwd=job.parent, env=env, timeout=300)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    failed = {c["name"]: c["detail"] for c in json.loads(bad.stdout)["checks"] if c["status"] == "fail"}
    assert "accumulate and lr through warmup" in failed and "planned" in failed["accumulate and lr through warmup"]


@pytest.mark.parametrize("launcher, devices, sets", [
    ("torchrun", "cpu:2", ()),
    ("xla", "xla:cpu", ("target.batch=4", f"model={REPO / 'tests' / 'assets' / 'tiny-det.yaml'}")),
])
def test_each_launcher_from_its_first_release(launcher, devices, sets, job):
    """The release before a launcher's first is refused at plan time in one line; from it, a job trains."""
    first = releases.LAUNCHER_MINIMUM[launcher][0]
    before = (first[0], first[1], first[2] - 1)
    args = [a for s in sets for a in ("--set", s)]
    env = cli_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(_installed(releases.text(before)))])})
    r = run_cli("submit", job, "-d", devices, *args, cwd=job.parent, env=env)
    assert r.returncode == 2 and f"target.devices: {devices} needs Ultralytics {releases.text(first)}" in r.stderr
    env = cli_env({"PYTHONPATH": os.pathsep.join([str(REPO), str(_installed(releases.text(first)))]),
                   "PJRT_DEVICE": "CPU"})
    r = run_cli("submit", job, "-d", devices, *args, "--set", f"name={launcher}", "--set", "stall_timeout=120", "--json",
                cwd=job.parent, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["summary"]["epochs_completed"] == 2


def test_a_resume_onto_a_launcher_the_release_cannot_run_is_refused_and_claims_nothing(job, tmp_path, monkeypatch):
    """The plan's release check runs on a resume too (plan.assemble, replan.py): a killed `cpu` run with a
    checkpoint, resumed on 8.3.228 (one before torchrun's first release) onto `cpu:2`, is refused in one
    line as `plan -d cpu:2` is; its registry row and job.resolved.yaml stay as they were. On its own devices,
    a release older than the training process works with (8.3.199) is refused as `plan` refuses it."""
    from orchestrator import runner
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan
    from orchestrator.registry import Registry
    from tests.helpers.checkpoints import write_checkpoint

    monkeypatch.setenv("YOLO_ORCH_REGISTRY", "")
    runs = tmp_path / "runs"
    run_id, run_dir = runner.create_run(make_plan(load_job(job)), runs_dir=runs)
    write_checkpoint(run_dir / "weights" / "last.pt", 1)
    with Registry.open(runs) as reg:
        reg.move(run_id, "killed")
    contract = (run_dir / "job.resolved.yaml").read_bytes()
    first = releases.LAUNCHER_MINIMUM["torchrun"][0]
    before = releases.text((first[0], first[1], first[2] - 1))
    env = cli_env({"YOLO_ORCH_REGISTRY": "", "PYTHONPATH": os.pathsep.join([str(REPO), str(_installed(before))])})
    r = run_cli("resume", run_id, "--devices", "cpu:2", "--runs-dir", runs, env=env, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"target.devices: cpu:2 needs Ultralytics {releases.text(first)}" in lines[0], lines
    assert (run_dir / "job.resolved.yaml").read_bytes() == contract
    with Registry.open(runs) as reg:
        assert reg.get(run_id).state == "killed"
    oldest = releases.text((8, 3, releases.OLDEST_WORKING[2] - 1))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(_installed(oldest))])
    r = run_cli("resume", run_id, "--runs-dir", runs, env=env, timeout=120)
    assert r.returncode == 2 and f"ultralytics {oldest} is installed" in r.stderr, r.stdout + r.stderr
    assert (run_dir / "job.resolved.yaml").read_bytes() == contract
