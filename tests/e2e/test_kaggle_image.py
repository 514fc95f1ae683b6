"""The Kaggle TPU image, emulated: its torch 2.8.0 / torchvision 0.23.0 / torch_xla 2.8.0 (made by
`scripts/setup.sh kaggle-image`; scripts/test.sh makes it), the wheels folder `yolo-orch kaggle
wheels` builds for it, and the generated kernel folder run end to end with no network (a network
namespace of its own: `unshare -n`). Session 1 installs yolo-orch and Ultralytics offline, trains
epoch 1 of 2 on 4 virtual XLA:CPU devices (SPMD, as on the TPU's cores) and stops at its session
limit; session 2, a fresh "VM" with session 1's output attached, installs again and resumes to the
end. Each session's environment is a new venv that sees the image's packages through a .pth file,
so the image itself is never changed and the check that the runner left its torch alone is real.

What differs from Kaggle: Python 3.11 (the image has 3.12), XLA:CPU devices instead of TPU cores."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, kaggle_job, run_cli

IMAGE = REPO / ".venv-kaggle-image"
IMAGE_STACK = {"torch": "2.8.0", "torchvision": "0.23.0", "torch_xla": "2.8.0"}
pytestmark = [pytest.mark.slow, pytest.mark.xla]


def _site(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


@pytest.fixture(scope="module")
def image() -> Path:
    why = None
    if not (IMAGE / "bin" / "python").exists():
        why = f"{IMAGE} is missing: bash scripts/setup.sh kaggle-image"
    elif shutil.which("unshare") is None or os.geteuid() != 0:
        why = "`unshare -n` (a network namespace: root) is not available here"
    if why and os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the emulated Kaggle image cannot run in CI: {why}")
    if why:
        pytest.skip(why)
    return IMAGE


def _versions(python: Path) -> dict:
    code = ("import importlib.metadata as m, json; "
            f"print(json.dumps({{n: m.version(n).split('+')[0] for n in {sorted(IMAGE_STACK)!r}}}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def _fresh_vm(image: Path, folder: Path) -> Path:
    """A new session's Python: an empty venv that sees the image's site-packages after its own."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=120)
    (_site(folder) / "_kaggle_image.pth").write_text(str(_site(image)) + "\n")
    return folder / "bin" / "python"


def _session(image: Path, kernel: Path, root: Path, wheels: Path, attach: Path | None = None):
    """Run a kernel folder as Kaggle would: a fresh VM, the wheels (and the previous output) under
    the input root, no network, none of this machine's environment but XLA_FLAGS."""
    python = _fresh_vm(image, root / "vm")
    inputs, working, scratch, home = (root / n for n in ("input", "working", "tmp", "home"))
    for p in (working, scratch, home):
        p.mkdir(parents=True)
    shutil.copytree(wheels, inputs / "yolo-orch-wheels")
    if attach is not None:
        shutil.copytree(attach, inputs / "notebooks" / "alice" / "yolo-orch-tiny")  # a nested mount
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "KAGGLE_INPUT_DIR": str(inputs),
           "KAGGLE_WORKING_DIR": str(working), "YOLO_ORCH_KAGGLE_TMP": str(scratch),
           # the one setting the suite gives every XLA:CPU test (scripts/test.sh): XLA:CPU's code generation at
           # -O0 stands in for the TPU's compiler here as everywhere else, and compiles the two sessions'
           # graphs faster (51 s against 66 s alone on a Zen 4); what runs on the devices is the same
           **{k: os.environ[k] for k in ("XLA_FLAGS",) if k in os.environ}}
    out = subprocess.run(["unshare", "-n", str(python), str(kernel / "run_kaggle.py")], env=env, cwd=kernel,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-3000:]
    assert "installing yolo_orch-0.1.0-py3-none-any.whl offline" in out.stdout
    assert not list(_site(root / "vm").glob("torch*")), "the install brought its own torch"
    return out, json.loads((working / "resume.json").read_text()), working


def _member(tarball: Path, name: str) -> str:
    with tarfile.open(tarball) as tar:
        return tar.extractfile(f"r1/{name}").read().decode()


def test_a_kernel_trains_and_resumes_in_the_kaggle_image_offline(image, tmp_path):
    assert _versions(image / "bin" / "python") == IMAGE_STACK
    wheels = tmp_path / "wheels"
    res = run_cli("kaggle", "wheels", "--out", wheels, "--owner", "alice", "--no-wandb", "--json",
                  "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    job = kaggle_job(tmp_path, epochs=2)
    common = ["--owner", "alice", "--devices", "xla:cpu:4", "--run-id", "r1", "--json"]
    res = run_cli("kaggle", "build", job, "--out", tmp_path / "k1", "--session-hours", "0.0001",
                  "--margin-minutes", "0", *common, cwd=tmp_path)
    assert res.returncode == 0, res.stderr

    out, state, working = _session(image, tmp_path / "k1", tmp_path / "s1", wheels)
    assert "session limit: stopping after epoch 1/2" in out.stdout
    assert state["state"] == "paused" and state["epochs_done"] == 1 and not state["done"]
    env = json.loads(_member(working / "tiny-r1.tar.gz", "env.json"))
    assert {k: env[k].split("+")[0] for k in IMAGE_STACK} == IMAGE_STACK  # trained on the image's stack

    res = run_cli("kaggle", "build", job, "--out", tmp_path / "k2", "--resume-from", "alice/yolo-orch-tiny",
                  *common, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out, state, working = _session(image, tmp_path / "k2", tmp_path / "s2", wheels, attach=working)
    assert "restored the previous session's run (1/2 epochs)" in out.stdout
    assert state["state"] == "finished" and state["epochs_done"] == 2 and state["done"] and state["session"] == 2
    events = [json.loads(ln) for ln in _member(working / "tiny-r1.tar.gz", "events.jsonl").splitlines()]
    starts = [(e["start_epoch"], e["world_size"]) for e in events if e["event"] == "train_start"]
    assert starts == [(0, 4), (1, 4)]  # SPMD over 4 devices; session 2 began at epoch 2
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    summary = json.loads(_member(working / "tiny-r1.tar.gz", "summary.json"))
    assert summary["xla"]["xla/world_size"] == 4 and summary["epochs_completed"] == 2
    assert _versions(image / "bin" / "python") == IMAGE_STACK  # the image is as it was
