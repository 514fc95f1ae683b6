"""A hand-written data.yaml read as Ultralytics reads it: a relative `path:` resolved like Ultralytics
(current folder, the user's datasets_dir), else beside the yaml, and handed to the trainer as an
absolute root; labels checked at plan time (errors in tests/unit/bad_inputs, warnings here); a folder that
is not an image folder stops the walk instead of reading the whole disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import run_cli, write_job
from orchestrator.data.synth import generate_dataset
from orchestrator.jobspec import dataset


def hand_written(tmp_path: Path, path_value: str, dataset_dir: Path) -> Path:
    """cfg/data.yaml with a relative `path:`, as in many Ultralytics data files."""
    generate_dataset(dataset_dir, images=16, val_images=8, classes=2, imgsz=64, seed=1)
    cfg = tmp_path / "cfg"
    cfg.mkdir(exist_ok=True)
    (cfg / "data.yaml").write_text(yaml.safe_dump({"path": path_value, "train": "images/train", "val": "images/val",
                                                   "names": ["rectangle", "ellipse"]}))
    return write_job(tmp_path, data="cfg/data.yaml")


@pytest.mark.slow
def test_relative_path_beside_the_yaml_trains_from_any_folder(tmp_path):
    job = hand_written(tmp_path, "../data/shapes", tmp_path / "data" / "shapes")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = run_cli("submit", job, "--json", "--set", f"runs_dir={tmp_path / 'runs'}", cwd=elsewhere)
    assert r.returncode == 0, r.stderr[-3000:]
    run_dir = Path(json.loads(r.stdout)["run_dir"])
    resolved = yaml.safe_load((run_dir / "job.resolved.yaml").read_text())
    assert resolved["plan"]["train_args"]["data"] == str(run_dir / "data.yaml")
    handed = yaml.safe_load((run_dir / "data.yaml").read_text())
    assert handed["path"] == str((tmp_path / "data" / "shapes").resolve()) and handed["names"] == ["rectangle",
                                                                                                  "ellipse"]
    assert resolved["plan"]["data"]["train_images"] == 16
    assert json.loads(r.stdout)["summary"]["epochs_completed"] == 1


def test_relative_path_under_the_users_datasets_dir(tmp_path):
    """Ultralytics resolves `path: shapes` against its settings' datasets_dir: so does the plan."""
    config = tmp_path / "ultralytics-config"
    (config / "Ultralytics").mkdir(parents=True)
    datasets = tmp_path / "my-datasets"
    (config / "Ultralytics" / "settings.json").write_text(json.dumps({"datasets_dir": str(datasets)}))
    job = hand_written(tmp_path, "shapes", datasets / "shapes")
    r = run_cli("submit", job, "--dry-run", "--json", cwd=tmp_path, env={"YOLO_CONFIG_DIR": str(config)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data"]["root"] == str((datasets / "shapes").resolve())


def test_relative_path_found_nowhere_names_every_place_tried(tmp_path):
    job = hand_written(tmp_path, "../no/such", tmp_path / "data" / "shapes")
    r = run_cli("plan", job, cwd=tmp_path)
    assert r.returncode == 2 and "path '../no/such' is not a folder" in r.stderr and "tried" in r.stderr


def test_background_images_are_a_warning_not_an_error(tmp_path):
    yaml_path = generate_dataset(tmp_path / "ds", images=16, val_images=8, classes=2, imgsz=64, seed=1)
    for label in sorted((tmp_path / "ds" / "labels" / "train").glob("*.txt"))[:3]:
        label.write_text("")
    job = write_job(tmp_path, data=str(yaml_path))
    r = run_cli("submit", job, "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "data: 3 of 16 train images have no labels: Ultralytics trains them as background images" in \
        json.loads(r.stdout)["warnings"]


def test_a_folder_of_other_files_stops_the_walk(tmp_path, monkeypatch):
    monkeypatch.setattr(dataset, "MAX_OTHER_ENTRIES", 50)
    root = tmp_path / "not-images"
    for i in range(120):
        (root / f"d{i % 7}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 7}" / f"f{i}.log").write_text("x")
    cfg = {"path": str(root), "train": ".", "val": ".", "names": ["a"]}
    found = dataset.scan(cfg, tmp_path / "data.yaml", 1)
    assert [p for p in found.problems if "train" in p] == [
        f"data: train folder {root.resolve()} holds more than 50 files and folders that are not images; "
        "point it at the images"]


def test_label_paths_follow_ultralytics():
    assert dataset.label_path("/d/images/train/a.b.jpg") == "/d/labels/train/a.b.txt"
    assert dataset.label_path("/images/x/images/y/a.png") == "/images/x/labels/y/a.txt"
    assert dataset.label_path("/d/flat/a.jpg") == "/d/flat/a.txt"
