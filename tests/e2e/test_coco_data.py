"""A job whose data is a COCO export (issue 64): JPEG images and annotation files this test writes, with the
category ids a custom export has (1-based, gaps, not in id order), a crowd annotation, a background image and
a box reaching outside its image. `plan` reads and checks them without training; `submit` converts them once
into the tool's cache and trains on the copy, with the file's class names; nothing is written into the
user's dataset; a bad dataset is refused in one line per problem with nothing written."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from PIL import Image, ImageDraw

from conftest import DEFAULT_WANDB, TINY_JOB, read_events, run_cli, write_job
from orchestrator.harness.cli import submit_json
from orchestrator.harness.runs import trained_data
from orchestrator.harness.annotations import box_mask, rle_of_mask
from orchestrator.tasks import EXAMPLE_MODELS, METRICS

CATEGORIES = [{"id": 7, "name": "scratch"}, {"id": 3, "name": "dent"}]
SIZE = 64


def coco_export(folder: Path, train: int = 12, val: int = 4, task: str = "detect") -> dict:
    """images/ and train.json, val.json as an annotation tool exports them: one shape per image, its category
    by its colour; the first training image has no annotation (background). segment: each square's polygon
    too (the third training image's as an RLE mask); pose: two keypoints (its top-left and bottom-right
    corners), named by the categories."""
    rng = random.Random(0)
    (folder / "images").mkdir(parents=True)
    files = {}
    categories = [{**c, "keypoints": ["tl", "br"]} for c in CATEGORIES] if task == "pose" else CATEGORIES
    for split, count, first in (("train", train, 0), ("val", val, 1000)):
        imgs, anns = [], []
        for i in range(count):
            iid, name = first + i, f"{split}_{i}.jpg"
            img = Image.new("RGB", (SIZE, SIZE), (20, 20, 20))
            cid = CATEGORIES[i % 2]["id"]
            x, y, w = rng.randint(4, 30), rng.randint(4, 30), rng.randint(12, 28)
            if not (split == "train" and i == 0):
                ImageDraw.Draw(img).rectangle([x, y, x + w, y + w], fill=(220, 60, 60) if cid == 7 else (60, 60, 220))
                polygon = [[x, y, x + w, y, x + w, y + w, x, y + w]]
                if split == "train" and i == 2:  # one mask run-length encoded, as pycocotools writes it
                    polygon = rle_of_mask(box_mask(SIZE, SIZE, x, y, x + w, y + w))
                shape = ({"segmentation": polygon} if task == "segment" else
                         {"keypoints": [x, y, 2, x + w, y + w, 2], "num_keypoints": 2} if task == "pose" else {})
                anns.append({"id": len(anns) + 1 + first, "image_id": iid, "category_id": cid, "bbox": [x, y, w, w],
                             "area": w * w, "iscrowd": 0, **shape})
            img.save(folder / "images" / name, "JPEG")
            imgs.append({"id": iid, "file_name": name, "width": SIZE, "height": SIZE})
        if split == "train":
            anns.append({**anns[0], "id": 999, "iscrowd": 1})  # a crowd region: skipped, counted
            anns.append({**anns[1], "id": 998, "bbox": [50, 50, 30, 30]})  # reaches outside: clipped
        files[split] = folder / f"{split}.json"
        files[split].write_text(json.dumps({"images": imgs, "annotations": anns, "categories": categories}))
    return files


def coco_job(folder: Path, task: str = "detect", **changes) -> Path:
    coco_export(folder / "export", task=task)
    return write_job(folder, TINY_JOB, data={"coco": {"train": "export/train.json", "val": "export/val.json",
                                                      "images": "export/images"}}, imgsz=SIZE, **changes)


def snapshot(folder: Path) -> dict:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.mark.slow
def test_a_coco_export_plans_trains_with_its_own_class_names_and_is_converted_once(tmp_path):
    job = coco_job(tmp_path)
    env = {"YOLO_ORCH_CACHE": str(tmp_path / "cache"), "YOLO_ORCH_REGISTRY": ""}
    export = snapshot(tmp_path / "export")
    plan = submit_json(job, "--dry-run", cwd=tmp_path, env=env)
    assert plan["data"]["train_images"] == 12 and plan["data"]["nc"] == 2
    assert plan["data"]["yaml"].endswith(f"coco-{plan['data']['digest'][:16]}/data.yaml")  # the record names the hash
    assert any("1 crowd annotations skipped" in w for w in plan["warnings"]), plan["warnings"]
    assert any("1 images without annotations (background)" in w for w in plan["warnings"])
    r = run_cli("plan", job, cwd=tmp_path, env=env)
    assert r.returncode == 0 and "1 boxes reaching outside their image clipped" in r.stdout + r.stderr
    assert not (tmp_path / "cache" / "datasets").exists()  # planning reads, never writes

    out = submit_json(job, cwd=tmp_path, env=env)
    assert out["state"] == "finished" and out["summary"]["epochs_completed"] == 1
    data_yaml = trained_data(Path(out["run_dir"]))
    assert data_yaml == Path(plan["data"]["yaml"]) and data_yaml.is_relative_to(tmp_path / "cache")
    assert yaml.safe_load(data_yaml.read_text())["names"] == {0: "scratch", 1: "dent"}  # the file's order
    labels = sorted((data_yaml.parent / "labels" / "train").glob("*.txt"))
    assert len(labels) == 11  # 12 images, one background
    made = data_yaml.stat().st_mtime_ns
    submit_json(job, cwd=tmp_path, env=env)
    assert data_yaml.stat().st_mtime_ns == made and len(list((tmp_path / "cache" / "datasets").iterdir())) == 1
    assert snapshot(tmp_path / "export") == export  # nothing written into the user's dataset


def test_a_missing_image_and_a_broken_file_are_refused_one_line_each_with_nothing_written(tmp_path):
    job = coco_job(tmp_path)
    (tmp_path / "export" / "images" / "train_3.jpg").unlink()
    (tmp_path / "export" / "val.json").write_text('{"images": [')
    env = {"YOLO_ORCH_CACHE": str(tmp_path / "cache"), "YOLO_ORCH_REGISTRY": ""}
    for command in ("plan", "submit"):
        r = run_cli(command, job, cwd=tmp_path, env=env)
        assert r.returncode == 2, r.stdout + r.stderr
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert len(lines) == 2 and "Traceback" not in r.stderr, lines
        assert "data.coco.train:" in lines[0] and "image 3:" in lines[0] and "train_3.jpg is not there" in lines[0]
        assert "data.coco.val:" in lines[1] and "val.json is not JSON" in lines[1]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache" / "datasets").exists()


def test_a_resume_where_the_converted_copy_is_missing_converts_it_again(tmp_path, monkeypatch):
    """Another node, or a cleaned cache: the run's copy is made again from the same files (resume.restore_data)."""
    import shutil

    from orchestrator import resume, runner
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan
    from orchestrator.rundir import load_resolved

    monkeypatch.setenv("YOLO_ORCH_CACHE", str(tmp_path / "cache"))
    job = coco_job(tmp_path)
    run_id, run_dir = runner.create_run(make_plan(load_job(job)), runs_dir=tmp_path / "runs")
    data_yaml = Path(load_resolved(run_dir).plan.data_path)
    names = data_yaml.read_text()
    shutil.rmtree(data_yaml.parent)
    note = resume.restore_data(load_resolved(run_dir), run_id)
    assert note == f"its converted COCO copy ({data_yaml.parent}) was missing here: converted again"
    assert data_yaml.read_text() == names


@pytest.mark.slow
@pytest.mark.parametrize("task", ["segment", "pose"])
def test_a_coco_segment_or_pose_export_trains_on_two_processes_reading_one_converted_copy(task, tmp_path):
    """Polygons train a segment model, keypoints a pose model (the task from the model, as for any job), on
    `cpu:2`: both torchrun ranks read the one copy submit converted before they started."""
    job = coco_job(tmp_path, task, model=EXAMPLE_MODELS[task], target={"devices": "cpu:2"}, wandb=DEFAULT_WANDB)
    env = {"YOLO_ORCH_CACHE": str(tmp_path / "cache"), "YOLO_ORCH_REGISTRY": ""}
    out = submit_json(job, cwd=tmp_path, env=env)
    run_dir = Path(out["run_dir"])
    assert out["state"] == "finished", (run_dir / "train.log").read_text()[-3000:]
    assert set(METRICS[task]) <= set(out["summary"]["metrics"]), out["summary"]["metrics"]
    assert [e["world_size"] for e in read_events(run_dir) if e["event"] == "train_start"] == [2]
    copies = list((tmp_path / "cache" / "datasets").iterdir())
    assert len(copies) == 1 and copies[0].name.startswith("coco-")
    data = yaml.safe_load((copies[0] / "data.yaml").read_text())
    assert data.get("kpt_shape") == ([2, 3] if task == "pose" else None)
    assert data["names"] == {0: "scratch", 1: "dent"} and len(list((copies[0] / "images" / "train").iterdir())) == 12
    for name in ("train_1", "train_2"):  # a polygon; in segment, the RLE mask traced to its 4 corners
        for line in (copies[0] / "labels" / "train" / f"{name}.txt").read_text().splitlines():
            assert len(line.split()) == (1 + 8 if task == "segment" else 1 + 4 + 2 * 3), line  # polygon; box + kpts
