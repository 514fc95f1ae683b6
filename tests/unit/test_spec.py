"""Job spec validation through the real CLI: good files plan, bad files exit 2 with
one line per problem naming the field, no traceback, nothing written."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import run_cli, write_job, write_text


def assert_bad(result, *expected, tmp_path=None):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    for text in expected:
        assert text in result.stderr, (text, result.stderr)
    if tmp_path is not None:
        assert not (tmp_path / "runs").exists(), "a bad job must not create a run directory"


def test_good_job_plans(tiny_job):
    result = run_cli("submit", tiny_job, "--dry-run", "--json", cwd=tiny_job.parent)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["devices"] == "cpu"
    args = plan["train_args"]
    assert (args["epochs"], args["imgsz"], args["batch"], args["optimizer"], args["lr0"]) == (1, 64, 8, "AdamW", 0.002)
    assert args["workers"] == 0 and args["device"] == "cpu"
    assert not (tiny_job.parent / "runs").exists(), "--dry-run writes nothing"


def test_set_and_devices_flags(tiny_job):
    result = run_cli("submit", tiny_job, "--dry-run", "--json", "--set", "epochs=3", "--set", "hyp.lr0=0.004",
                     "--set", "overrides.workers=1", cwd=tiny_job.parent)
    assert result.returncode == 0, result.stderr
    args = json.loads(result.stdout)["train_args"]
    assert (args["epochs"], args["lr0"], args["workers"]) == (3, 0.004, 1)


@pytest.mark.parametrize(
    "changes,expected",
    [
        ({"epochs": -3}, "epochs: must be greater than or equal to 1 (got -3)"),
        ({"epochs": 0}, "epochs: must be greater than or equal to 1 (got 0)"),
        ({"imgsz": 0}, "imgsz: must be greater than or equal to 32 (got 0)"),
        ({"epochs": "ten"}, "epochs: must be a valid integer"),
        ({"reference": {"devices": 1, "batch": 0}}, "reference.batch: must be greater than or equal to 1 (got 0)"),
        ({"target": {"devices": "gpu7"}}, "target.devices: 'gpu7' is not a device spec"),
        ({"target": {"devices": "cpu", "batch": 8, "batch_per_device": 4}}, "target: give target.batch"),
        ({"colour": "red"}, "colour: unknown key"),
        ({"hyp": {"lr0": 0.01, "lr_zero": 1}}, "hyp.lr_zero: unknown key"),
        ({"wandb": {"mode": "sometimes"}}, "wandb.mode:"),
        ({"scaling": {"policy": "magic"}}, "scaling.policy:"),
        ({"hyp": {"optimizer": "Adagrad"}}, "hyp.optimizer:"),
        ({"model": "yolo99z.yaml"}, "model: unknown model yaml 'yolo99z.yaml'"),
        ({"model": "yolo11n.pt"}, "model: weights file 'yolo11n.pt' not found"),
        ({"overrides": {"workres": 2}}, "overrides.workres: not an Ultralytics train argument; did you mean 'workers'?"),
        ({"overrides": {"lr0": 0.1}}, "overrides.lr0: a hyperparameter"),
        ({"overrides": {"batch": 32}}, "overrides.batch: not allowed here; set `target.batch` instead"),
        ({"name": "../../etc"}, "name:"),
        ({"hyp": "no-such-preset"}, "hyp: preset 'no-such-preset' not found"),
        ({"data": "missing/data.yaml"}, "data: dataset yaml 'missing/data.yaml' not found"),
    ],
)
def test_bad_fields(tmp_path, changes, expected):
    job = write_job(tmp_path, **changes)
    assert_bad(run_cli("submit", job, cwd=tmp_path), expected, tmp_path=tmp_path)


def test_several_problems_one_line_each(tmp_path):
    job = write_job(tmp_path, epochs=-1, imgsz=-5, colour="red")
    result = run_cli("submit", job, cwd=tmp_path)
    assert_bad(result, "epochs:", "imgsz:", "colour: unknown key", tmp_path=tmp_path)
    assert len(result.stderr.strip().splitlines()) == 3


def test_missing_file(tmp_path):
    assert_bad(run_cli("submit", tmp_path / "nope.yaml", cwd=tmp_path), "nope.yaml: no such job file")


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    job = write_text(tmp_path, "job.yaml", "name: x\nepochs: [1, 2\nimgsz: 64\n")
    result = run_cli("submit", job, cwd=tmp_path)
    assert_bad(result, "YAML syntax error")
    assert "job.yaml:3:" in result.stderr or "job.yaml:2:" in result.stderr


def test_empty_and_binary_files(tmp_path):
    empty = write_text(tmp_path, "empty.yaml", "")
    assert_bad(run_cli("submit", empty, cwd=tmp_path), "file is empty")
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\x00\x01\x02garbage")
    assert_bad(run_cli("submit", binary, cwd=tmp_path), "binary data")


def test_data_yaml_pointing_at_missing_folders(tmp_path):
    (tmp_path / "data.yaml").write_text(yaml.safe_dump({"path": str(tmp_path / "ds"), "train": "images/train",
                                                        "val": "images/val", "names": ["a"]}))
    job = write_job(tmp_path, data="data.yaml")
    assert_bad(run_cli("submit", job, cwd=tmp_path), "data: train folder", "data: val folder", tmp_path=tmp_path)


def test_bad_devices_flag(tiny_job):
    assert_bad(run_cli("submit", tiny_job, "--devices", "gpu:x", cwd=tiny_job.parent), "--devices:")


def test_bad_set_flag(tiny_job):
    assert_bad(run_cli("submit", tiny_job, "--set", "epochs", cwd=tiny_job.parent), "--set epochs: expected KEY=VALUE")


def test_schema_is_json_schema():
    result = run_cli("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["type"] == "object"
    assert {"name", "model", "data", "epochs", "hyp", "reference", "target", "scaling", "wandb", "overrides"} <= set(
        schema["properties"])
    assert schema["additionalProperties"] is False


def test_example_jobs_are_valid():
    from conftest import REPO

    for job in sorted((REPO / "examples").glob("*.yaml")):
        result = run_cli("submit", job, "--dry-run", "--json", cwd=REPO)
        if "sweep" in job.name:
            continue
        assert result.returncode == 0, (job, result.stderr)


def test_the_stock_defaults_are_ultralytics_own():
    """scaling/ultralytics_math.DEFAULTS (the job spec's reference and the scaler's inputs default to
    them) are the installed Ultralytics' default.yaml values."""
    from orchestrator.scaling.ultralytics_math import DEFAULTS
    from orchestrator.jobspec.ultralytics_cfg import default_cfg

    stock = default_cfg()
    assert {key: stock[key] for key in DEFAULTS} == DEFAULTS
