"""A job whose data is an Ultralytics NDJSON file (issue 64), as the Platform exports it, with its images
local (the dataset record's `path`): PNG images and the file this test writes, one image without
annotations and no `val` split; boxes for a detect model, polygons for a segment model. `plan` reads and
checks it without training; `submit` converts it once into the tool's cache and trains on the copy with the
file's class names, W&B as users have it (offline); nothing is written beside the user's file; `yolo-orch
train data=FILE.ndjson` reuses the copy."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from PIL import Image, ImageDraw

from conftest import DEFAULT_WANDB, TINY_JOB, TINY_MODEL, write_job
from orchestrator.harness.cli import run_cli, submit_json
from orchestrator.harness.runs import trained_data
from orchestrator.jobspec.ndjson import KEYS
from orchestrator.tasks import EXAMPLE_MODELS, METRICS

SIZE = 64


def ndjson_export(folder: Path, count: int = 20, task: str = "detect") -> Path:
    """export/shapes.ndjson and export/files/images/train/*.png: one square per image, its class by its
    colour; the first image has none (background). No `val` split: the converter draws one. segment: each
    square's polygon; obb: its four corners."""
    rng = random.Random(0)
    images = folder / "files" / "images" / "train"
    images.mkdir(parents=True)
    lines = [{"type": "dataset", "task": task, "name": "shapes", "path": "files",
              "class_names": {"0": "red", "1": "blue"}, "version": 1}]
    for i in range(count):
        img, name, labels = Image.new("RGB", (SIZE, SIZE), (20, 20, 20)), f"{i:03d}.png", []
        if i:
            cls, x, y, w = i % 2, rng.randint(4, 30), rng.randint(4, 30), rng.randint(12, 28)
            ImageDraw.Draw(img).rectangle([x, y, x + w, y + w], fill=(220, 60, 60) if cls == 0 else (60, 60, 220))
            x0, y0, x1, y1 = x / SIZE, y / SIZE, (x + w) / SIZE, (y + w) / SIZE
            labels.append([cls, x0, y0, x1, y0, x1, y1, x0, y1] if task in ("segment", "obb") else
                          [cls, (x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0])
        img.save(images / name)
        lines.append({"type": "image", "file": name, "split": "train", "width": SIZE, "height": SIZE,
                      "annotations": {KEYS[task]: labels}})
    path = folder / "shapes.ndjson"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def snapshot(folder: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.mark.slow
def test_an_ndjson_file_plans_trains_with_its_own_class_names_and_is_converted_once(tmp_path):
    ndjson_export(tmp_path / "export")
    job = write_job(tmp_path, TINY_JOB, data={"ndjson": "export/shapes.ndjson"}, imgsz=SIZE, wandb=DEFAULT_WANDB)
    env = {"YOLO_ORCH_CACHE": str(tmp_path / "cache"), "YOLO_ORCH_REGISTRY": ""}
    export = snapshot(tmp_path / "export")
    plan = submit_json(job, "--dry-run", cwd=tmp_path, env=env)
    assert plan["data"]["train_images"] == 18 and plan["data"]["nc"] == 2  # 20, of which 2 validate
    assert plan["data"]["ndjson"] == str(tmp_path / "export" / "shapes.ndjson")
    digest = plan["data"]["digest"]  # the record names the file's hash, and the copy is named by it
    assert len(digest) == 64 and plan["data"]["yaml"].endswith(f"ndjson-{digest[:16]}/data.yaml")
    assert any("1 image(s) without annotations" in w for w in plan["warnings"]), plan["warnings"]
    assert any("no `val` split: 2 of the 20 training images validate" in w for w in plan["warnings"])
    assert not (tmp_path / "cache" / "datasets").exists()  # planning reads, never writes

    out = submit_json(job, cwd=tmp_path, env=env)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 1
    data_yaml = trained_data(Path(out["run_dir"]))
    assert data_yaml == Path(plan["data"]["yaml"]) and data_yaml.is_relative_to(tmp_path / "cache")
    assert yaml.safe_load(data_yaml.read_text())["names"] == {0: "red", 1: "blue"}
    assert len(list((data_yaml.parent / "images" / "val").iterdir())) == 2
    made = data_yaml.stat().st_mtime_ns
    # `yolo-orch train` with Ultralytics' words names the same file: the same copy, not a second conversion
    r = run_cli("train", f"model={TINY_MODEL}", "data=export/shapes.ndjson", "epochs=1", f"imgsz={SIZE}", "batch=8",
                "workers=0", "plots=False", "--json", cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert trained_data(Path(json.loads(r.stdout)["run_dir"])) == data_yaml
    assert data_yaml.stat().st_mtime_ns == made and len(list((tmp_path / "cache" / "datasets").iterdir())) == 1
    assert snapshot(tmp_path / "export") == export  # nothing written beside the user's file


@pytest.mark.slow
@pytest.mark.parametrize("task", ["segment", "obb"])
def test_an_ndjson_segment_or_obb_file_trains_its_task(task, tmp_path):
    ndjson_export(tmp_path / "export", task=task)
    job = write_job(tmp_path, TINY_JOB, data={"ndjson": "export/shapes.ndjson"}, imgsz=SIZE,
                    model=EXAMPLE_MODELS[task])
    env = {"YOLO_ORCH_CACHE": str(tmp_path / "cache"), "YOLO_ORCH_REGISTRY": ""}
    out = submit_json(job, cwd=tmp_path, env=env)
    assert out["state"] == "finished" and set(METRICS[task]) <= set(out["summary"]["metrics"])
    data_yaml = trained_data(Path(out["run_dir"]))
    assert yaml.safe_load(data_yaml.read_text())["names"] == {0: "red", 1: "blue"}
    assert len((data_yaml.parent / "labels" / "train" / "001.txt").read_text().split()) == 9  # class + 4 points
