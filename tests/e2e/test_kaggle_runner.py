"""The generated runner script, executed here in a simulated Kaggle layout (input and working
folders from KAGGLE_INPUT_DIR / KAGGLE_WORKING_DIR): setup errors, the W&B secret fallback,
the offline install from a wheels folder, and real training on XLA:CPU (slow)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, build, cli_env, kaggle_job

from orchestrator.kaggle.build import read_bundle


def layout(tmp_path: Path) -> dict:
    roots = {name: tmp_path / "kaggle" / name for name in ("input", "working", "tmp")}
    for p in roots.values():
        p.mkdir(parents=True, exist_ok=True)
    return {"KAGGLE_INPUT_DIR": str(roots["input"]), "KAGGLE_WORKING_DIR": str(roots["working"]),
            "YOLO_ORCH_KAGGLE_TMP": str(roots["tmp"])}


def run_runner(folder: Path, env: dict, timeout: float = 900, python: str = sys.executable,
               base_env: dict | None = None) -> subprocess.CompletedProcess:
    full = dict(base_env if base_env is not None else cli_env())
    full.update(env)
    return subprocess.run([python, str(folder / "run_kaggle.py")], env=full, capture_output=True, text=True,
                          timeout=timeout, cwd=folder)


def load_runner(folder: Path):
    spec = importlib.util.spec_from_file_location(f"runner_{abs(hash(str(folder)))}", folder / "run_kaggle.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_template_itself_refuses_to_run():
    res = subprocess.run([sys.executable, str(REPO / "orchestrator" / "kaggle" / "kernel_runner.py")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "yolo-orch kaggle build" in res.stderr


def test_missing_wheels_dataset_is_a_clear_error_with_outputs(tmp_path):
    res, folder = build(tmp_path)
    assert res.returncode == 0, res.stderr
    env = layout(tmp_path)
    out = run_runner(folder, env, timeout=120)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "attach the wheels dataset (alice/yolo-orch-wheels)" in out.stderr
    state = json.loads((Path(env["KAGGLE_WORKING_DIR"]) / "resume.json").read_text())
    assert state["state"] == "failed" and state["done"] is False and state["exit_code"] == 3


def test_a_kernel_without_its_tpu_stops_within_a_minute_with_one_line(tmp_path):
    """A TPU kernel that lands on another image (here: this CPU machine, torch_xla without libtpu)
    stops before installing or training, says what it expected and what it found, and leaves the
    reason in resume.json, which `yolo-orch kaggle pull` and the launch loop show."""
    import time

    res, folder = build(tmp_path)  # tpu:8 on TpuV5E8
    assert res.returncode == 0, res.stderr
    env = layout(tmp_path)
    wheels = Path(env["KAGGLE_INPUT_DIR"]) / "yolo-orch-wheels"
    wheels.mkdir()
    (wheels / "yolo_orch-0.0.0-py3-none-any.whl").write_bytes(b"never installed")
    started = time.time()
    out = run_runner(folder, env, timeout=120)
    assert time.time() - started < 60
    assert out.returncode == 3, out.stdout + out.stderr
    errors = [ln for ln in out.stderr.splitlines() if "ERROR" in ln]
    assert len(errors) == 1 and "expected a TPU for tpu:8 (machine_shape TpuV5E8)" in errors[0], out.stderr
    assert "found none" in errors[0] and "nothing trained" in errors[0] and "Traceback" not in out.stderr
    assert "installing" not in out.stdout  # stopped before the install
    state = json.loads((Path(env["KAGGLE_WORKING_DIR"]) / "resume.json").read_text())
    assert state["state"] == "failed" and state["done"] is False and "expected a TPU" in state["reason"]


def test_resume_without_the_previous_output_attached_is_a_clear_error(tmp_path):
    res, folder = build(tmp_path, "--resume-from", "alice/yolo-orch-tiny", "--run-id", "r9")
    assert res.returncode == 0, res.stderr
    out = run_runner(folder, layout(tmp_path), timeout=120)
    assert out.returncode == 3
    assert "no resume.json of run r9" in out.stderr and "kernel_sources" in out.stderr


def test_wandb_secret_missing_falls_back_offline_and_found_goes_online(tmp_path, monkeypatch, capsys):
    job = kaggle_job(tmp_path, wandb={"mode": "online"})
    res, folder = build(tmp_path, "--internet", job=job)
    assert res.returncode == 0, res.stderr
    runner = load_runner(folder)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setitem(sys.modules, "kaggle_secrets", None)  # not on Kaggle: import fails
    env: dict = {}
    assert runner.wandb_setup(env) == "offline"
    assert env == {"WANDB_MODE": "offline"}
    err = capsys.readouterr().out
    assert "WARNING" in err and "Add-ons > Secrets > WANDB_API_KEY" in err

    secret = "wandb-key-from-kaggle-secrets-0123456789"
    fake = type(sys)("kaggle_secrets")

    class UserSecretsClient:
        def get_secret(self, name):
            assert name == "WANDB_API_KEY"
            return secret

    fake.UserSecretsClient = UserSecretsClient
    monkeypatch.setitem(sys.modules, "kaggle_secrets", fake)
    env = {}
    assert runner.wandb_setup(env) == "online"
    assert env == {"WANDB_API_KEY": secret, "WANDB_MODE": "online"}  # for the child's environment only
    assert secret not in capsys.readouterr().out


def test_restore_refuses_unsafe_tarballs(tmp_path):
    res, folder = build(tmp_path)
    runner = load_runner(folder)
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        evil = tmp_path / "evil.txt"
        evil.write_text("x")
        tar.add(evil, arcname="../escape.txt")
    with pytest.raises(runner.RunnerError, match="refusing member"):
        runner.restore({"tarball": bad, "state": {}}, tmp_path / "run")


def _site_without_this_project(tmp_path: Path) -> Path:
    """This venv's site-packages minus yolo-orch (a symlink farm): the 'image' for the install test."""
    import pydantic

    site = Path(pydantic.__file__).resolve().parents[1]
    farm = tmp_path / "image-site"
    farm.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("yolo_orch", "__editable__", "_virtualenv")) or name.endswith(".pth"):
            continue
        (farm / entry.name).symlink_to(entry)
    return farm


@pytest.mark.slow
def test_offline_install_from_the_wheels_folder_keeps_the_image_torch(tmp_path):
    """The runner's real `pip install --no-index --find-links --constraint` into a fresh venv whose
    'image' (torch, torchvision, torch_xla, Ultralytics...) is this environment minus yolo-orch."""
    res, folder = build(tmp_path)
    assert res.returncode == 0, res.stderr
    env = layout(tmp_path)
    wheels = Path(env["KAGGLE_INPUT_DIR"]) / "datasets" / "alice" / "yolo-orch-wheels"  # a nested mount
    wheels.mkdir(parents=True)
    from orchestrator.kaggle.wheels import copy_source, project_wheel_command

    src = copy_source(tmp_path / "src")
    wb = subprocess.run(project_wheel_command(src, wheels), capture_output=True, text=True, timeout=600)
    assert wb.returncode == 0, wb.stderr
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    base["PYTHONPATH"] = str(_site_without_this_project(tmp_path))
    base["YOLO_ORCH_KAGGLE_CHECK_INSTALL"] = "1"
    probe = subprocess.run([python, "-c", "import orchestrator"], env=base, capture_output=True, text=True,
                           cwd=tmp_path)
    assert probe.returncode != 0  # really not importable before the install
    out = run_runner(folder, env, timeout=600, python=python, base_env=base)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "installing yolo_orch-0.1.0-py3-none-any.whl offline" in out.stdout
    assert "torch==" in out.stdout and "install check passed" in out.stdout
    assert str(venv) in out.stdout  # yolo-orch now comes from the fresh environment
    assert not list((venv / "lib").glob("python*/site-packages/torch"))  # the image's torch was kept


def _xla_ready() -> str | None:
    if importlib.util.find_spec("torch_xla") is None:
        return "torch_xla is not installed"
    if importlib.util.find_spec("orchestrator.worker.xla.run") is None:
        return "the XLA backend (orchestrator.worker.xla.run) is not there yet"
    return None


def _xla_env(tmp_path: Path) -> dict:
    env = layout(tmp_path)
    env.update(YOLO_ORCH_KAGGLE_SKIP_INSTALL="1", PJRT_DEVICE="CPU", YOLO_OFFLINE="1",
               YOLO_ORCH_CACHE=str(tmp_path / "cache"))
    return env


def _members(tarball: Path) -> set[str]:
    with tarfile.open(tarball) as tar:
        return {"/".join(Path(m.name).parts[1:]) for m in tar.getmembers()}


@pytest.mark.slow
@pytest.mark.xla
def test_runner_stops_before_the_session_limit_and_the_next_session_resumes(tmp_path):
    """Session 1 of a 2-epoch job gets a session too short for a second epoch: it stops after
    epoch 1 with a resumable checkpoint. Session 2 (built with --resume-from, the first session's
    output attached under the input root) continues to epoch 2 and leaves what a finished kernel leaves: its
    resume.json, summary.json and the run's tarball (a one-session kernel trained one epoch for these checks
    before: 17 s of the suite). The limit (0.36 s) has passed
    before the first epoch ends on any machine (the deadline is only consulted at epoch ends,
    so the first epoch always runs); a limit near one epoch's length made this test depend on
    the machine's speed (36 s let a fast machine fit both epochs)."""
    why = _xla_ready()
    if why:
        pytest.skip(why)
    job = kaggle_job(tmp_path, epochs=2)
    res, folder1 = build(tmp_path, "--devices", "xla:cpu", "--run-id", "r2", "--session-hours", "0.0001",
                         "--margin-minutes", "0", job=job)
    assert res.returncode == 0, res.stderr
    env = _xla_env(tmp_path / "s1")
    out = run_runner(folder1, env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "session limit: stopping after epoch 1/2" in out.stdout
    working = Path(env["KAGGLE_WORKING_DIR"])
    state = json.loads((working / "resume.json").read_text())
    assert state["state"] == "paused" and state["done"] is False and state["epochs_done"] == 1
    assert "weights/session_resume.pt" in _members(working / "tiny-r2.tar.gz")

    folder2 = tmp_path / "kernel2"
    res = subprocess.run([sys.executable, "-m", "orchestrator", "kaggle", "build", str(job), "--out", str(folder2),
                          "--owner", "alice", "--devices", "xla:cpu", "--run-id", "r2", "--resume-from",
                          "alice/yolo-orch-tiny", "--json"], env=cli_env(), capture_output=True, text=True,
                         cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert read_bundle(folder2)["session"] == 2
    env2 = _xla_env(tmp_path / "s2")
    attached = Path(env2["KAGGLE_INPUT_DIR"]) / "notebooks" / "alice" / "yolo-orch-tiny"  # a nested mount
    shutil.copytree(working, attached)
    out = run_runner(folder2, env2)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "restored the previous session's run (1/2 epochs)" in out.stdout
    working2 = Path(env2["KAGGLE_WORKING_DIR"])
    assert sorted(p.name for p in working2.iterdir()) == ["resume.json", "summary.json", "tiny-r2.tar.gz"]
    assert "session limit: stopping" not in out.stdout
    state = json.loads((working2 / "resume.json").read_text())
    assert state["state"] == "finished" and state["done"] is True and state["epochs_done"] == 2
    assert state["session"] == 2
    assert state["kernel"] == read_bundle(folder2)["kernel"] and state["tarball"] == "tiny-r2.tar.gz"
    tarball = working2 / "tiny-r2.tar.gz"
    members = _members(tarball)
    for name in ("weights/best.pt", "weights/last.pt", "results.csv", "events.jsonl", "summary.json",
                 "job.resolved.yaml", "resume.json"):
        assert name in members, sorted(members)
    assert "weights/session_resume.pt" not in members
    with tarfile.open(tarball) as tar:
        results = tar.extractfile("r2/results.csv").read().decode()
        events = [json.loads(x) for x in tar.extractfile("r2/events.jsonl").read().decode().splitlines()]
    assert len([ln for ln in results.splitlines() if ln.strip()]) == 3  # header + epochs 1 and 2
    assert [e["session"] for e in events if e["event"] == "session_start"] == [1, 2]
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
