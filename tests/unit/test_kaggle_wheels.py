"""`yolo-orch kaggle wheels`: the pip commands it builds for the Kaggle TPU image, the
stand-ins that keep torch's CUDA tree out, the exclusions, and one real (small) download."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import run_cli

from orchestrator.kaggle import metadata as md
from orchestrator.kaggle.wheels import (EXCLUDE, WheelsOptions, build_wheels, constraints_text, pins_from_report,
                                        stub_wheel)


def test_dry_run_prints_the_commands_for_the_image(tmp_path):
    res = run_cli("kaggle", "wheels", "--owner", "alice", "--out", tmp_path / "w", "--dry-run", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert not (tmp_path / "w").exists()  # nothing written
    wheel_cmd, resolve_cmd, download_cmd = out["commands"]
    assert " wheel --no-deps " in wheel_cmd
    for cmd in (resolve_cmd, download_cmd):
        assert "--only-binary=:all:" in cmd and "--python-version 3.12" in cmd and "--abi cp312" in cmd
        assert "--platform manylinux2014_x86_64" in cmd and "--platform manylinux_2_28_x86_64" in cmd
    assert "--dry-run" in resolve_cmd and "--report" in resolve_cmd and "--constraint" in resolve_cmd
    assert "yolo-orch ultralytics==" in resolve_cmd and resolve_cmd.endswith(" wandb")
    assert " download --no-deps " in download_cmd and f"-d {tmp_path / 'w'}" in download_cmd
    assert out["dataset"] == "alice/yolo-orch-wheels"


def test_the_emulated_image_has_the_versions_the_wheels_are_built_for():
    """requirements/kaggle-image.txt (the image the tests emulate) and KAGGLE_TPU_IMAGE (what the wheels
    folder is resolved against) name the same accelerator stack."""
    from conftest import REPO

    from orchestrator.kaggle.wheels import KAGGLE_TPU_IMAGE

    lines = (REPO / "requirements" / "kaggle-image.txt").read_text().splitlines()
    pins = dict(ln.split("==") for ln in lines if ln.strip() and not ln.startswith("#"))
    assert pins == {"torch": KAGGLE_TPU_IMAGE["torch"], "torchvision": KAGGLE_TPU_IMAGE["torchvision"],
                    "torch-xla": KAGGLE_TPU_IMAGE["torch_xla"]}


def test_exclusions_keep_the_image_stack_out_but_not_helpers():
    report = {"install": [{"metadata": {"name": n, "version": "1"}} for n in (
        "torch", "torchvision", "torch_xla", "triton", "nvidia-cudnn-cu12", "nvidia-nccl-cu12", "libtpu",
        "yolo-orch", "numpy", "nvidia-ml-py", "ultralytics")]}
    pins, excluded = pins_from_report(report)
    assert pins == ["numpy==1", "nvidia-ml-py==1", "ultralytics==1"]
    assert len(excluded) == 8
    assert EXCLUDE.match("torch-xla") and not EXCLUDE.match("torchmetrics")


def test_stand_ins_resolve_instead_of_the_real_torch(tmp_path):
    """Resolving against the stand-ins needs no index and pulls no nvidia-*/triton."""
    opts = WheelsOptions(out=tmp_path, owner="alice")
    for name, version in (("torch", "2.8.0"), ("torchvision", "0.23.0")):
        stub_wheel(tmp_path, name, version)
    (tmp_path / "c.txt").write_text(constraints_text(opts))
    report = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index",
                          "--quiet", "--find-links", str(tmp_path), "--constraint", str(tmp_path / "c.txt"),
                          "--report", str(report), "torchvision>=0.17", "torch>=2.2"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    names = {i["metadata"]["name"]: i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    assert names == {"torch": "2.8.0+kaggleimage", "torchvision": "0.23.0+kaggleimage"}


def test_real_download_of_one_small_package(tmp_path):
    """The real pip path, one small pure wheel (no project build, no Ultralytics tree)."""
    out = tmp_path / "wheels"
    res = run_cli("kaggle", "wheels", "--owner", "alice", "--out", out, "--package", "six", "--no-project", "--json",
                  timeout=300)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout)
    assert len(info["wheels"]) == 1 and info["wheels"][0].startswith("six-")
    assert all(p.is_file() for p in out.iterdir())  # flat: datasets create skips subfolders
    meta = json.loads((out / md.DATASET_METADATA).read_text())
    assert md.validate_dataset_metadata(meta) == []
    assert meta["id"] == "alice/yolo-orch-wheels" and 6 <= len(meta["title"]) <= 50
    manifest = json.loads((out / "yolo-orch-wheels.json").read_text())
    assert manifest["python"] == "3.12" and manifest["requirements"] == ["six"]
    assert "kaggle datasets create -p" not in res.stdout  # --json: the data only


def test_bad_dataset_title_is_refused_before_any_download(tmp_path):
    res = run_cli("kaggle", "wheels", "--owner", "alice", "--out", tmp_path / "w", "--title", "tiny", "--package",
                  "six", "--no-project")
    assert res.returncode == 2 and "title" in res.stderr
    assert not (tmp_path / "w").exists()


def test_project_wheel_source_copy_is_clean(tmp_path):
    from orchestrator.kaggle.wheels import copy_source

    src = copy_source(tmp_path)
    assert (src / "pyproject.toml").is_file() and (src / "orchestrator" / "kaggle" / "kernel_runner.py").is_file()
    assert not list(src.rglob("__pycache__")) and not (src / "build").exists()
    assert build_wheels  # imported for the API surface
    assert Path(src / "orchestrator" / "__init__.py").read_text()
