"""`yolo-orch train key=value ...`: Ultralytics' own command line, planned and run like `submit`;
`--save` writes the job file it means, and that file plans the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_cli

TINY = str(REPO / "orchestrator" / "worker" / "xla" / "tiny-det.yaml")


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
