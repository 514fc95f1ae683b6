"""`yolo-orch kaggle push|status|pull|quota` against a fake `kaggle` executable on PATH
(the Kaggle service is unreachable from here): arguments passed, answers parsed, and one
clear line with exit 2 when the CLI is missing, not authenticated or refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import fake_kaggle as fk
from conftest import build, run_cli

from orchestrator.kaggle.tool import parse_status


def kernel_folder(tmp_path: Path) -> Path:
    res, out = build(tmp_path)
    assert res.returncode == 0, res.stderr
    return out


def test_push_status_pull_quota_through_the_cli(tmp_path):
    folder = kernel_folder(tmp_path)
    env = fk.install(tmp_path)

    res = run_cli("kaggle", "push", folder, "--json", env=env)
    assert res.returncode == 0, res.stderr
    pushed = json.loads(res.stdout)
    assert pushed["kernel"] == "alice/yolo-orch-tiny" and pushed["version"] == 1
    assert pushed["url"] == "https://www.kaggle.com/code/alice/yolo-orch-tiny"
    copy = fk.pushed(env)[0]
    assert json.loads((copy / "kernel-metadata.json").read_text())["id"] == "alice/yolo-orch-tiny"

    res = run_cli("kaggle", "status", "alice/yolo-orch-tiny", env=env)
    assert res.returncode == 0 and "alice/yolo-orch-tiny: running" in res.stdout
    res = run_cli("kaggle", "status", folder, "--json", env=env)  # a kernel folder works too
    status = json.loads(res.stdout)
    assert status["state"] == "complete" and status["terminal"] is True
    assert status["raw"] == "KernelWorkerStatus.COMPLETE"

    fk.stage_output(env, "yolo-orch-tiny", {"resume.json": json.dumps(
        {"run_id": "r1", "epochs": 3, "epochs_done": 1, "done": False, "state": "paused"}),
        "tiny-r1.tar.gz": b"not really a tarball"})
    dest = tmp_path / "pulled"
    res = run_cli("kaggle", "pull", "alice/yolo-orch-tiny", "--out", dest, env=env)
    assert res.returncode == 0, res.stderr
    assert (dest / "resume.json").is_file() and (dest / "tiny-r1.tar.gz").is_file()
    assert (dest / "yolo-orch-tiny.log").is_file()
    assert "1/3 epochs, paused" in res.stdout and "--resume-from alice/yolo-orch-tiny" in res.stdout

    res = run_cli("kaggle", "quota", env=env)
    assert res.returncode == 0 and "TPU" in res.stdout
    res = run_cli("kaggle", "quota", "--json", env=env)
    rows = json.loads(res.stdout)["rows"]
    assert rows[0] == {"accelerator": "TPU", "used_hours": "3.5", "limit_hours": "20"}

    assert fk.calls(env) == [
        ["kernels", "push", "-p", str(folder)],
        ["kernels", "status", "alice/yolo-orch-tiny"],
        ["kernels", "status", "alice/yolo-orch-tiny"],
        ["kernels", "output", "alice/yolo-orch-tiny", "-p", str(dest), "-o"],
        ["quota"],
        ["quota", "-v"],
    ]


def test_missing_cli_is_one_line_exit_2(tmp_path):
    folder = kernel_folder(tmp_path)
    empty = tmp_path / "emptybin"
    empty.mkdir()
    env = {"PATH": str(empty), "KAGGLE_CONFIG_DIR": str(tmp_path)}
    for args in (["push", folder], ["status", "alice/x-kernel"], ["pull", "alice/x-kernel"], ["quota"]):
        res = run_cli("kaggle", *args, env=env)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "not on PATH" in lines[0] and "pip install kaggle" in lines[0], lines


def test_not_authenticated_is_one_line_exit_2(tmp_path):
    env = fk.install(tmp_path, credentials=False)
    env["HOME"] = str(tmp_path)
    res = run_cli("kaggle", "status", "alice/yolo-orch-tiny", env=env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "not authenticated" in lines[0] and "kaggle.json" in lines[0]
    assert fk.calls(env) == []  # the CLI was not even started


def test_refused_credentials_never_show_the_key(tmp_path):
    env = fk.install(tmp_path, mode="unauth")
    env.update(KAGGLE_USERNAME="alice", KAGGLE_KEY=fk.FAKE_KEY)
    res = run_cli("kaggle", "status", "alice/yolo-orch-tiny", env=env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused the credentials" in lines[0] and "401" in lines[0]
    assert fk.FAKE_KEY not in res.stdout + res.stderr


def test_old_cli_without_quota_says_how_to_see_it(tmp_path):
    env = fk.install(tmp_path, mode="no_quota")
    res = run_cli("kaggle", "quota", env=env)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install -U kaggle" in lines[0] and "Session options" in lines[0]


def test_push_error_reported_with_exit_0_is_caught(tmp_path):
    folder = kernel_folder(tmp_path)
    env = fk.install(tmp_path, mode="push_error")
    res = run_cli("kaggle", "push", folder, env=env)
    assert res.returncode == 2 and "Notebook not found" in res.stderr


def test_push_needs_a_built_folder(tmp_path):
    env = fk.install(tmp_path)
    res = run_cli("kaggle", "push", tmp_path, env=env)
    assert res.returncode == 2 and "kernel-metadata.json" in res.stderr


def test_status_parsing_old_and_new_cli_forms():
    assert parse_status('alice/k has status "KernelWorkerStatus.COMPLETE"\n')[0] == "complete"
    assert parse_status('alice/k has status "running"')[0] == "running"
    state, raw, msg = parse_status('a/b has status "KernelWorkerStatus.ERROR"\nFailure message: "boom"\n')
    assert (state, raw, msg) == ("error", "KernelWorkerStatus.ERROR", "boom")
    assert parse_status("KernelWorkerStatus.CANCEL_ACKNOWLEDGED")[0] == "cancel_acknowledged"


def test_fake_cli_env_does_not_touch_the_real_kaggle_config(tmp_path):
    env = fk.install(tmp_path)
    assert Path(env["KAGGLE_CONFIG_DIR"]).is_relative_to(tmp_path)
    assert os.environ.get("KAGGLE_CONFIG_DIR") != env["KAGGLE_CONFIG_DIR"]
