"""Ultralytics NDJSON read and checked without a pixel (orchestrator/jobspec/ndjson.py) and converted once
(ndjson_convert.py), on files these tests write as the Ultralytics Platform exports them, with local images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image as PILImage

from orchestrator.errors import UserError
from orchestrator.jobspec.ndjson import read_ndjson
from orchestrator.jobspec.ndjson_convert import convert, converted_yaml

NAMES = {"0": "scratch", "1": "dent"}


def dataset(tmp_path: Path, records: list[dict], task: str = "detect", images: dict | None = None,
            **head) -> Path:
    """An NDJSON file beside its images folder (`path: imgs`): each record's image made as a small PNG."""
    for record in records:
        if record.get("split") in ("train", "val", "test") and isinstance(record.get("file"), str):
            folder = tmp_path / "imgs" / "images" / record["split"]
            folder.mkdir(parents=True, exist_ok=True)
            if "/" not in record["file"]:
                PILImage.new("RGB", (32, 24), (90, 120, 40)).save(folder / record["file"])
    first = {"type": "dataset", "task": task, "class_names": NAMES, "path": "imgs", **head}
    path = tmp_path / "set.ndjson"
    path.write_text("\n".join(json.dumps(r) for r in [first, *records]) + "\n")
    return path


def image(name: str, split: str = "train", **annotations) -> dict:
    return {"type": "image", "file": name, "split": split, "width": 32, "height": 24,
            **({"annotations": annotations} if annotations else {})}


def test_a_detect_file_reads_its_classes_images_and_background(tmp_path):
    path = dataset(tmp_path, [image("a.png", boxes=[[0, 0.5, 0.5, 0.2, 0.3], [1, 0.25, 0.25, 0.1, 0.1]]),
                              image("b.png"), image("c.png", "val", boxes=[[1, 0.5, 0.5, 0.5, 0.5]])])
    data = read_ndjson(path)
    assert (data.task, data.names, data.kpt_shape, data.train_images) == ("detect", ("scratch", "dent"), None, 2)
    assert data.warnings == ["data.ndjson: 1 image(s) without annotations: background images, as Ultralytics reads "
                             "them"]
    assert len(data.digest) == 64


def test_without_a_val_split_a_tenth_of_the_training_images_validate_as_ultralytics_draws_them(tmp_path):
    import random

    names = [f"{i:02d}.png" for i in range(20)]
    data = read_ndjson(dataset(tmp_path, [image(n, boxes=[[0, 0.5, 0.5, 0.2, 0.2]]) for n in names]))
    expected = list(names)
    random.Random(0).shuffle(expected)  # ultralytics.data.converter: Random(0).shuffle, the first len // 10
    assert sorted(i.file for i in data.split("val")) == sorted(expected[:2]) and data.train_images == 18
    assert "no `val` split: 2 of the 20 training images validate" in data.warnings[-1]


@pytest.mark.parametrize("records, head, task, expected", [
    ([image("a.png", boxes=[[5, 0.5, 0.5, 0.2, 0.2]])], {}, "detect",
     "set.ndjson:2: boxes [5, 0.5, 0.5, 0.2, 0.2]: class 5 is not one of the class_names' ids (0..1)"),
    ([image("a.png", boxes=[[0, 0.5, 0.5, 1.4, 0.2]])], {}, "detect",
     "a coordinate outside 0..1 (the values are normalised to the image)"),
    ([image("a.png", boxes=[[0, 0.5, 0.5, 0.2]])], {}, "detect",
     "a box is [class, x_center, y_center, width, height] (3 values after the class)"),
    ([image("a.png", segments=[[0, 0.1, 0.1, 0.2, 0.2]])], {}, "segment",
     "a polygon is [class, x1, y1, x2, y2, x3, y3, ...]: at least three points"),
    ([image("a.png", pose=[[0, 0.5, 0.5, 0.2, 0.2, 0.5, 0.5, 2]])], {}, "pose",
     "a pose dataset needs `kpt_shape: [keypoints, 2 or 3]` (got None)"),
    ([image("a.png", pose=[[0, 0.5, 0.5, 0.2, 0.2, 0.5, 0.5, 2]])], {"kpt_shape": [2, 3]}, "pose",
     "a pose label is [class, box (4), 2 keypoints x 3] (7 values after the class)"),
    ([image("a.png", boxes=[[0, 0.5, 0.5, 0.2, 0.2]])], {}, "segment",
     "set.ndjson:2: annotations hold boxes; a segment dataset reads segments"),
    ([image("a.png", "holdout")], {}, "detect", "set.ndjson:2: split 'holdout' is not one of train, val, test"),
    ([image("../a.png")], {}, "detect", "set.ndjson:2: file '../a.png' is not a plain file name"),
    ([image("a.png"), image("a.png")], {}, "detect", "set.ndjson:3: a.png is named twice in the train split"),
    ([image("a.png", obb=[[0, 0.5, 0.5, 0.2, 0.2, 0.3]])], {}, "obb",
     "an oriented box is the YOLO OBB label [class, x1, y1, x2, y2, x3, y3, x4, y4] (5 values after the class)"),
    ([image("a.png")], {}, "classify",
     "task 'classify' is not converted by yolo-orch (it converts detect, segment, pose, obb)"),
    ([image("a.png", "val")], {}, "detect", "set.ndjson has no image in the `train` split"),
])
def test_each_blocking_problem_is_one_line_naming_the_file_and_line(tmp_path, records, head, task, expected):
    with pytest.raises(UserError) as caught:
        read_ndjson(dataset(tmp_path, records, task, **head))
    assert any(expected in line for line in caught.value.problems), caught.value.problems


def test_an_obb_file_keeps_its_corner_lines_as_ultralytics_writes_them(tmp_path):
    corners = [0, 0.1, 0.2, 0.6, 0.1, 0.7, 0.6, 0.2, 0.7]  # a rotated box, as a YOLO OBB label line
    path = dataset(tmp_path, [image("a.png", obb=[corners]), image("b.png", "val", obb=[corners])], "obb")
    data = read_ndjson(path)
    expect = converted_yaml(tmp_path / "cache", data)
    convert(path, expect)
    assert (expect.parent / "labels" / "train" / "a.txt").read_text() == "0 0.1 0.2 0.6 0.1 0.7 0.6 0.2 0.7\n"


def test_a_missing_image_and_an_image_only_at_a_url_are_refused_offline(tmp_path):
    path = dataset(tmp_path, [image("a.png")])
    (tmp_path / "imgs" / "images" / "train" / "a.png").unlink()
    with pytest.raises(UserError) as caught:
        read_ndjson(path)
    assert caught.value.problems == [f"data.ndjson: {path}:2: image {tmp_path}/imgs/images/train/a.png does not exist"]
    records = [{"type": "dataset", "task": "detect", "class_names": NAMES},  # no `path`: images by URL only
               {**image("a.png"), "url": "https://storage.example.com/a.png?X-Goog-Signature=s3cr3t"}]
    path.write_text("\n".join(map(json.dumps, records)))
    with pytest.raises(UserError) as caught:
        read_ndjson(path)
    line = caught.value.problems[0]
    assert "image a.png is only at a URL (https://storage.example.com/...) and is never downloaded" in line
    assert "s3cr3t" not in line


def test_a_file_that_is_not_ndjson_is_one_line(tmp_path):
    path = tmp_path / "x.ndjson"
    path.write_text('{"type": "image", "file": "a.png"}\n[1, 2]\n')
    with pytest.raises(UserError) as caught:
        read_ndjson(path)
    assert caught.value.problems == [f"data.ndjson: {path}:2: not a JSON object"]
    path.write_text('{"type": "image", "file": "a.png"}\n')
    with pytest.raises(UserError) as caught:
        read_ndjson(path)
    assert "the first line must be the dataset record" in caught.value.problems[0]


def test_the_converted_copy_links_the_images_writes_the_labels_and_is_made_once(tmp_path):
    kpts = [[0, 0.5, 0.5, 0.4, 0.4, 0.4, 0.4, 2, 0.6, 0.6, 1]]
    path = dataset(tmp_path, [image("a.png", pose=kpts), image("b.png"), image("c.png", "val", pose=kpts)],
                   "pose", kpt_shape=[2, 3])
    data = read_ndjson(path)
    expect = converted_yaml(tmp_path / "cache", data)
    assert convert(path, expect) == expect and expect.parent.name == f"ndjson-{data.digest[:16]}"
    folder = expect.parent
    assert (folder / "images" / "train" / "a.png").resolve() == tmp_path / "imgs" / "images" / "train" / "a.png"
    assert (folder / "labels" / "train" / "a.txt").read_text() == "0 0.5 0.5 0.4 0.4 0.4 0.4 2 0.6 0.6 1\n"
    assert not (folder / "labels" / "train" / "b.txt").exists()  # background: no label file
    text = expect.read_text()
    assert "kpt_shape:\n- 2\n- 3" in text and "0: scratch" in text and "val: images/val" in text
    stamp = expect.stat().st_mtime_ns
    assert convert(path, expect) == expect and expect.stat().st_mtime_ns == stamp  # reused, not made again
    path.write_text(path.read_text().replace("0.6, 0.6", "0.7, 0.6"))  # the file changed since the plan
    with pytest.raises(UserError) as caught:
        convert(path, tmp_path / "cache" / "ndjson-0000000000000000" / "data.yaml")
    assert "changed since the run was planned" in caught.value.problems[0]
    assert not any(p.name.startswith(".") for p in (tmp_path / "cache").iterdir())  # no scratch folder left


def test_data_import_writes_a_yolo_folder_that_stands_alone_and_a_job_plans_on_it(tmp_path):
    """`yolo-orch data import FILE.ndjson --out DIR`: images copied, labels, a data.yaml without `path:`."""
    import yaml

    from conftest import TINY_JOB, run_cli, write_job

    path = dataset(tmp_path, [image(f"{i}.png", boxes=[[i % 2, 0.5, 0.5, 0.2, 0.2]]) for i in range(4)]
                   + [image("v.png", "val", boxes=[[0, 0.5, 0.5, 0.4, 0.4]])])
    r = run_cli("data", "import", path, "--out", tmp_path / "yolo", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    done = json.loads(r.stdout)
    assert (done["source"], done["task"], done["images"], done["names"]) == ("ndjson", "detect",
                                                                             {"train": 4, "val": 1}, ["scratch", "dent"])
    folder = tmp_path / "yolo"
    assert not (folder / "images" / "train" / "0.png").is_symlink()  # a copy: the folder can be moved
    assert (folder / "labels" / "train" / "1.txt").read_text() == "1 0.5 0.5 0.2 0.2\n"
    assert "path" not in yaml.safe_load((folder / "data.yaml").read_text())
    job = write_job(tmp_path, TINY_JOB, data="yolo/data.yaml")
    r = run_cli("submit", job, "--dry-run", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["data"]["train_images"] == 4, r.stderr
    again = run_cli("data", "import", path, "--out", folder, cwd=tmp_path)
    assert again.returncode == 2 and "--out:" in again.stderr and "exists; name a new folder" in again.stderr
    r = run_cli("data", "import", path, "--out", tmp_path / "other", "--images", tmp_path, cwd=tmp_path)
    assert r.returncode == 2 and "--val/--images: apply to a COCO export" in r.stderr
    assert not (tmp_path / "other").exists()


def test_yolo_train_words_name_an_ndjson_file_and_refuse_a_coco_json_one(tmp_path):
    from conftest import TINY_MODEL, run_cli

    path = dataset(tmp_path, [image(f"{i}.png", boxes=[[0, 0.5, 0.5, 0.2, 0.2]]) for i in range(3)]
                   + [image("v.png", "val")])
    r = run_cli("train", f"model={TINY_MODEL}", f"data={path}", "epochs=1", "imgsz=32", "--dry-run", "--json",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["data"]["ndjson"] == str(path)
    r = run_cli("train", f"model={TINY_MODEL}", "data=export.json", "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "data: export.json is JSON: a COCO export trains from a job file" in r.stderr


def test_data_import_download_fetches_images_known_only_by_url_when_asked(tmp_path):
    """A Platform export (signed URLs, no local images) served on loopback: `--download` fetches each image once
    into the new folder; a URL that fails is one line naming host and path, never its signature, and leaves
    nothing behind."""
    import functools
    import http.server
    import threading

    from conftest import run_cli

    served = tmp_path / "served"
    served.mkdir()
    for name in ("a.png", "b.png"):
        PILImage.new("RGB", (32, 24), (10, 200, 30)).save(served / name)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        head = {"type": "dataset", "task": "detect", "class_names": NAMES}
        records = [head, {**image("a.png", boxes=[[0, 0.5, 0.5, 0.2, 0.2]]), "url": f"{base}/a.png?sig=s3cr3t"},
                   {**image("b.png", "val"), "url": f"{base}/b.png?sig=s3cr3t"}]
        path = tmp_path / "platform.ndjson"
        path.write_text("\n".join(map(json.dumps, records)))
        r = run_cli("data", "import", path, "--out", tmp_path / "yolo", "--download", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert (tmp_path / "yolo" / "images" / "val" / "b.png").read_bytes() == (served / "b.png").read_bytes()
        assert (tmp_path / "yolo" / "labels" / "train" / "a.txt").read_text() == "0 0.5 0.5 0.2 0.2\n"
        records[2]["url"] = f"{base}/gone.png?sig=s3cr3t"
        path.write_text("\n".join(map(json.dumps, records)))
        r = run_cli("data", "import", path, "--out", tmp_path / "again", "--download", cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert f"--download: {base}/gone.png: HTTP 404" in r.stderr and "s3cr3t" not in r.stderr
        assert not (tmp_path / "again").exists() and not list(tmp_path.glob(".again.*"))
    finally:
        server.shutdown()


def test_a_kaggle_kernel_of_an_ndjson_job_is_refused_with_the_way_to_build_one(tmp_path):
    from conftest import TINY_JOB, TINY_MODEL, run_cli, write_job

    train = [image(f"{i}.png", boxes=[[0, 0.5, 0.5, 0.2, 0.2]]) for i in range(64)]  # 8 cores x 8: fixed batches
    dataset(tmp_path, train + [image("v.png", "val")])
    job = write_job(tmp_path, TINY_JOB, data={"ndjson": "set.ndjson"}, model=str(TINY_MODEL),
                    target={"devices": "tpu:8"})
    r = run_cli("kaggle", "build", job, "--out", tmp_path / "kernel", "--owner", "alice", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "data.ndjson: a Kaggle session trains on a YOLO dataset uploaded as a Kaggle dataset: write one with " \
           "`yolo-orch data import SOURCE --out DIR`" in r.stderr
    assert not (tmp_path / "kernel").exists()


def test_where_the_model_does_not_say_its_task_the_annotations_do(tmp_path):
    """A model yaml whose head Ultralytics does not name (ultralytics_cfg.model_yaml_task: None): the task is
    the NDJSON file's, else Ultralytics' default, detect."""
    from orchestrator.jobspec.job import JobSpec
    from orchestrator.jobspec.loader import LoadedJob, _check_model_task

    dataset(tmp_path, [image("a.png", segments=[[0, 0.1, 0.1, 0.5, 0.1, 0.5, 0.5]])], task="segment")
    job = LoadedJob(JobSpec.model_validate({"name": "j", "model": "custom.yaml", "data": {"ndjson": "set.ndjson"}}),
                    None, tmp_path)
    assert _check_model_task(job, None) == [] and job.spec.task == "segment"
    job = LoadedJob(JobSpec.model_validate({"name": "j", "model": "custom.yaml", "data": "data.yaml"}), None, tmp_path)
    assert _check_model_task(job, None) == [] and job.spec.task == "detect"
