"""`yolo-orch train key=value ...`: Ultralytics' own command line, planned and run like `submit`;
`--save` writes the job file it means, and that file plans the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_cli
from orchestrator.tasks import TASKS

TINY = str(REPO / "tests" / "assets" / "tiny-det.yaml")


@pytest.fixture
def shapes(tmp_path) -> Path:
    r = run_cli("data", "synth", "--out", tmp_path / "shapes", "--images", "16", "--val-images", "8", "--classes", "2",
                "--imgsz", "64", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return tmp_path / "shapes" / "data.yaml"


def test_the_words_of_yolo_train_plan_as_the_job_file_they_mean(tmp_path, shapes):
    words = [f"model={TINY}", f"data={shapes}", "epochs=2", "imgsz=64", "batch=8", "device=cpu", "lr0=0.002",
             "optimizer=AdamW", "cos_lr=True", "workers=0", "plots=False", "seed=3"]
    r = run_cli("train", *words, "--save", tmp_path / "job.yaml", "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    from_words = json.loads(r.stdout)
    saved = yaml.safe_load((tmp_path / "job.yaml").read_text())
    assert saved["hyp"] == {"lr0": 0.002, "optimizer": "AdamW", "cos_lr": True}
    assert saved["reference"] == saved["target"] == {"devices": "cpu", "batch": 8}
    assert saved["overrides"] == {"workers": 0, "plots": False}
    r = run_cli("submit", tmp_path / "job.yaml", "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    from_file = json.loads(r.stdout)
    assert from_words["train_args"] == from_file["train_args"]
    args = from_words["train_args"]
    assert (args["batch"], args["nbs"], args["lr0"], args["epochs"], args["seed"]) == (8, 64, 0.002, 2, 3)
    assert not list(tmp_path.glob("runs"))  # a dry run creates no run


@pytest.mark.slow
def test_yolo_train_words_train_a_run(tmp_path, shapes):
    r = run_cli("train", f"model={TINY}", f"data={shapes}", "epochs=1", "imgsz=64", "batch=8", "device=cpu",
                "workers=0", "plots=False", "name=words", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 1
    assert Path(out["run_dir"]).parent == tmp_path / "runs" / "words"


# Ultralytics' own CLI tests (tests/test_cli.py: test_train, test_rtdetr's word forms), with this
# machine's data and model yamls in place of downloaded weights and datasets.
ULTRALYTICS_FORMS = {
    "test_train": "train {task} model={model} data={data} imgsz=32 epochs=1 cache=disk",
    "test_rtdetr": "train {task} model={model} data={data} --imgsz= 32 epochs =1, cache = disk",
    "task first": "{task} train model={model} data={data} imgsz=32 epochs=1 cache=disk",
    "mode= task=": "mode=train task={task} model={model} data={data} imgsz=32 epochs=1 cache=disk",
}


@pytest.mark.parametrize("task", TASKS)
def test_ultralytics_cli_test_commands_plan_alike(tmp_path, task):
    from orchestrator.data.synth import generate_dataset
    from orchestrator.tasks import EXAMPLE_MODELS

    data = generate_dataset(tmp_path / "data", images=8, val_images=4, classes=2, imgsz=32, seed=0, task=task)
    plans = {}
    for form, words in ULTRALYTICS_FORMS.items():
        line = words.format(task=task, model=EXAMPLE_MODELS[task], data=data).split()  # split as `run()` does
        r = run_cli("train", *line, "--dry-run", "--json", cwd=tmp_path)
        assert r.returncode == 0, f"{form}: {r.stderr}"
        plans[form] = json.loads(r.stdout)["train_args"]
        assert (plans[form]["imgsz"], plans[form]["epochs"], plans[form]["cache"]) == (32, 1, "disk"), form
    assert all(p == plans["test_train"] for p in plans.values())


def test_a_cfg_file_gives_arguments_under_the_command_line(tmp_path, shapes):
    (tmp_path / "custom.yaml").write_text("epochs: 3\nimgsz: 96\noptimizer: SGD\nlr0: 0.02\nsave_txt: true\n")
    r = run_cli("train", f"model={TINY}", f"data={shapes}", "imgsz=64", "cfg=custom.yaml", "epochs=2", "plots",
                "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    args = json.loads(r.stdout)["train_args"]
    assert (args["epochs"], args["imgsz"], args["optimizer"], args["lr0"]) == (2, 64, "SGD", 0.02)
    assert args["save_txt"] is True and args["plots"] is True
    assert "Overriding" in r.stderr


@pytest.mark.slow
def test_ultralytics_repaired_words_train_a_run(tmp_path, shapes):
    """`--imgsz= 64 epochs =1, batch = 8`: merged and repaired as Ultralytics does, with its warnings."""
    line = f"train detect model={TINY} data={shapes} --imgsz= 64 epochs =1, batch = 8 workers=0 plots=False"
    r = run_cli(*line.split(), "device=cpu", "name=repaired", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "does not require leading dashes '--'" in r.stderr and "does not require trailing comma" in r.stderr
    out = json.loads(r.stdout)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 1
