"""COCO JSON read and checked without a pixel (orchestrator/jobspec/coco.py), on datasets these tests write:
JPEG images and annotation files as CVAT, Label Studio or Roboflow export them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from orchestrator.errors import UserError
from orchestrator.jobspec.coco import read_coco

W, H = 64, 48


def images(folder: Path, count: int) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        name = f"img{i}.jpg"
        Image.new("RGB", (W, H), (40 * i % 255, 90, 160)).save(folder / name, "JPEG")
        out.append({"id": 100 + i, "file_name": name, "width": W, "height": H})
    return out


def annotation(aid: int, image: int, category: int, bbox=(4, 4, 20, 16), **extra) -> dict:
    return {"id": aid, "image_id": image, "category_id": category, "bbox": list(bbox), "area": bbox[2] * bbox[3],
            "iscrowd": 0, **extra}


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


CUSTOM = [{"id": 7, "name": "scratch"}, {"id": 3, "name": "dent"}, {"id": 12, "name": "rust"}]  # 1-based, gaps


def test_custom_category_ids_keep_their_names_in_the_files_order_and_the_counted_problems_are_warnings(tmp_path):
    imgs = images(tmp_path / "images", 4)
    anns = [annotation(1, 100, 7), annotation(2, 100, 12), annotation(3, 101, 3),
            annotation(4, 101, 3, iscrowd=1),  # crowd: skipped and counted
            annotation(5, 102, 12, bbox=(50, 40, 30, 20)),  # reaches outside the 64x48 image: clipped
            annotation(6, 102, 7, bbox=(10, 10, 0, 5))]  # zero area: dropped
    # image 103 has no annotation: background
    train = write(tmp_path / "train.json", {"images": imgs, "annotations": anns, "categories": CUSTOM})
    val = write(tmp_path / "val.json", {"images": imgs[:1], "annotations": anns[:1], "categories": CUSTOM})
    data = read_coco({"train": (train, tmp_path / "images"), "val": (val, tmp_path / "images")})
    assert data.task == "detect" and data.names == ("scratch", "dent", "rust")
    assert data.class_of == {7: 0, 3: 1, 12: 2} and data.kpt_shape is None
    assert data.train_images == 4
    assert data.warnings == ("data.coco.train: train.json: 1 crowd annotations skipped (as Ultralytics skips them)",
                             "data.coco.train: train.json: 1 images without annotations (background)",
                             "data.coco.train: train.json: 1 boxes of zero area dropped",
                             "data.coco.train: train.json: 1 boxes reaching outside their image clipped")


def test_cocos_own_categories_get_ultralytics_91_to_80_classes(tmp_path):
    """COCO's files list their categories in id order: the file's order is the 91-to-80 table there."""
    from ultralytics.data.converter import coco80_to_coco91_class, coco91_to_coco80_class

    folder = tmp_path
    ids = coco80_to_coco91_class()
    cats = [{"id": cid, "name": f"c{cid}"} for cid in ids]
    imgs = images(folder / "images", 1)
    ann = write(folder / "instances.json", {"images": imgs, "annotations": [annotation(1, 100, ids[-1])],
                                           "categories": cats})
    data = read_coco({"train": (ann, folder / "images")})
    table = coco91_to_coco80_class()
    assert len(data.names) == 80 and all(data.class_of[cid] == table[cid - 1] for cid in ids)


def test_polygons_and_rle_masks_are_a_segment_dataset(tmp_path):
    imgs = images(tmp_path / "images", 2)
    anns = [annotation(1, 100, 7, segmentation=[[4, 4, 24, 4, 24, 20, 4, 20]]),
            annotation(2, 101, 3, segmentation={"size": [H, W], "counts": [100, 20, 2952]})]
    ann = write(tmp_path / "seg.json", {"images": imgs, "annotations": anns, "categories": CUSTOM})
    data = read_coco({"train": (ann, tmp_path / "images")})
    assert data.task == "segment" and not data.warnings


def test_keypoints_are_a_pose_dataset_and_a_wrong_count_is_named(tmp_path):
    imgs = images(tmp_path / "images", 2)
    person = [{"id": 1, "name": "person", "keypoints": ["nose", "left_eye", "right_eye"], "skeleton": [[1, 2]]}]
    anns = [annotation(1, 100, 1, keypoints=[10, 10, 2, 12, 8, 2, 8, 8, 1], num_keypoints=3),
            annotation(2, 101, 1, keypoints=[10, 10, 2, 12, 8, 2], num_keypoints=2)]
    path = write(tmp_path / "pose.json", {"images": imgs, "annotations": anns[:1], "categories": person})
    data = read_coco({"train": (path, tmp_path / "images")})
    assert data.task == "pose" and data.kpt_shape == (3, 3) and data.names == ("person",)
    write(path, {"images": imgs, "annotations": anns, "categories": person})
    with pytest.raises(UserError) as err:
        read_coco({"train": (path, tmp_path / "images")})
    assert err.value.problems == [f"data.coco.train: {path}: annotation 2 has 2 keypoints, its category 3"]


def test_a_missing_image_and_a_broken_file_are_one_line_each(tmp_path):
    imgs = images(tmp_path / "images", 2)
    (tmp_path / "images" / "img1.jpg").unlink()
    train = write(tmp_path / "train.json", {"images": imgs, "annotations": [annotation(1, 100, 7)],
                                            "categories": CUSTOM})
    val = tmp_path / "val.json"
    val.write_text('{"images": [], "annotations": [')
    with pytest.raises(UserError) as err:
        read_coco({"train": (train, tmp_path / "images"), "val": (val, tmp_path / "images")})
    missing, broken = err.value.problems
    assert missing == f"data.coco.train: {train}: image 101: {tmp_path / 'images' / 'img1.jpg'} is not there"
    assert broken.startswith(f"data.coco.val: {val} is not JSON (Expecting value: line 1")


def test_ids_names_and_references_the_file_gets_wrong_are_named(tmp_path):
    imgs = images(tmp_path / "images", 2)
    cats = [{"id": 7, "name": "scratch"}, {"id": 7, "name": "again"}, {"id": 9, "name": " "}]
    anns = [annotation(1, 100, 7), annotation(1, 101, 7), annotation(2, 555, 7), annotation(3, 101, 42)]
    path = write(tmp_path / "bad.json", {"images": imgs + [dict(imgs[0]), dict(imgs[1], id=300)], "annotations": anns,
                                         "categories": cats})
    with pytest.raises(UserError) as err:
        read_coco({"train": (path, tmp_path / "images")})
    assert err.value.problems == [
        f"data.coco.train: {path}: category id 7 is listed twice",
        f"data.coco.train: {path}: category 9 has no name",
        f"data.coco.train: {path}: image id 100 is listed twice",
        f"data.coco.train: {path}: image 300's file_name img1.jpg is image 101's too",
        f"data.coco.train: {path}: annotation id 1 is listed twice",
        f"data.coco.train: {path}: annotation 2 names image 555, which the file does not list",
        f"data.coco.train: {path}: annotation 3 names category 42, which the file does not list"]


def test_splits_with_other_categories_and_files_that_are_not_coco_are_refused(tmp_path):
    imgs = images(tmp_path / "images", 1)
    train = write(tmp_path / "train.json", {"images": imgs, "annotations": [], "categories": CUSTOM})
    val = write(tmp_path / "val.json", {"images": imgs, "annotations": [], "categories": CUSTOM[:2]})
    with pytest.raises(UserError) as err:
        read_coco({"train": (train, tmp_path / "images"), "val": (val, tmp_path / "images")})
    assert err.value.problems == [f"data.coco.val: {val} lists other categories than {train} (train); every split "
                                  "must list the same, in the same order"]
    labelme = write(tmp_path / "labelme.json", {"shapes": [], "imagePath": "img0.jpg"})
    with pytest.raises(UserError) as err:
        read_coco({"train": (labelme, tmp_path / "images")})
    assert err.value.problems == [f"data.coco.train: {labelme} is not a COCO annotation file (no images, "
                                  "annotations, categories list)"]


def _converted(tmp_path: Path, splits: dict, task: str) -> Path:
    from orchestrator.jobspec.coco_convert import convert, converted_yaml

    expect = converted_yaml(tmp_path / "cache" / "datasets", read_coco(splits))
    assert convert(splits, task, expect) == expect
    return expect


def test_a_segment_dataset_is_converted_to_polygons_beside_links_to_the_users_images(tmp_path):
    imgs = images(tmp_path / "images", 2)
    anns = [annotation(1, 100, 3, segmentation=[[4, 4, 24, 4, 24, 20, 4, 20], [30, 30, 34, 30, 34, 34]]),
            annotation(2, 100, 7, bbox=(40, 30, 40, 30))]  # no polygon: its (clipped) box's corners
    ann = write(tmp_path / "seg.json", {"images": imgs, "annotations": anns, "categories": CUSTOM})
    before = sorted(p.name for p in (tmp_path / "images").iterdir())
    data_yaml = _converted(tmp_path, {"train": (ann, tmp_path / "images"), "val": (ann, tmp_path / "images")},
                           "segment")
    root = data_yaml.parent
    import yaml

    doc = yaml.safe_load(data_yaml.read_text())
    assert doc["names"] == {0: "scratch", 1: "dent", 2: "rust"} and doc["path"] == str(root)
    lines = (root / "labels" / "train" / "img0.txt").read_text().splitlines()
    assert lines[0] == "1 0.0625 0.0833333 0.375 0.0833333 0.375 0.416667 0.0625 0.416667"  # the larger polygon
    assert lines[1] == "0 0.625 0.625 1 0.625 1 1 0.625 1"  # 40..64 x 30..48, clipped
    assert not (root / "labels" / "train" / "img1.txt").exists()  # background: no label file
    link = root / "images" / "train" / "img1.jpg"
    assert link.is_symlink() and link.resolve() == (tmp_path / "images" / "img1.jpg").resolve()
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == before  # nothing written beside the user's
    assert _converted(tmp_path, {"train": (ann, tmp_path / "images"), "val": (ann, tmp_path / "images")},
                      "segment") == data_yaml  # the same files: the same copy, not made again


def test_a_pose_dataset_carries_its_keypoints_and_kpt_shape(tmp_path):
    imgs = images(tmp_path / "images", 1)
    person = [{"id": 1, "name": "person", "keypoints": ["nose", "left_eye"]}]
    anns = [annotation(1, 100, 1, keypoints=[32, 24, 2, 16, 12, 1]), annotation(2, 100, 1, bbox=(0, 0, 8, 8))]
    ann = write(tmp_path / "pose.json", {"images": imgs, "annotations": anns, "categories": person})
    data_yaml = _converted(tmp_path, {"train": (ann, tmp_path / "images"), "val": (ann, tmp_path / "images")}, "pose")
    import yaml

    assert yaml.safe_load(data_yaml.read_text())["kpt_shape"] == [2, 3]
    first, second = (data_yaml.parent / "labels" / "train" / "img0.txt").read_text().splitlines()
    assert first == "0 0.21875 0.25 0.3125 0.333333 0.5 0.5 2 0.25 0.25 1"
    assert second == "0 0.0625 0.0833333 0.125 0.166667 0 0 0 0 0 0"  # no keypoints: each unlabelled


def test_annotation_files_changed_since_the_plan_are_refused(tmp_path):
    from orchestrator.jobspec.coco_convert import convert, converted_yaml

    imgs = images(tmp_path / "images", 1)
    ann = write(tmp_path / "a.json", {"images": imgs, "annotations": [annotation(1, 100, 7)], "categories": CUSTOM})
    splits = {"train": (ann, tmp_path / "images"), "val": (ann, tmp_path / "images")}
    planned = converted_yaml(tmp_path / "cache" / "datasets", read_coco(splits))
    write(ann, {"images": imgs, "annotations": [annotation(1, 100, 3)], "categories": CUSTOM})
    with pytest.raises(UserError) as err:
        convert(splits, "detect", planned)
    assert "the annotation files changed since the run was planned" in err.value.problems[0]
    assert not planned.parent.exists() and not list((tmp_path / "cache" / "datasets").glob(".coco-*"))


def test_data_import_of_a_coco_export_links_its_images_when_asked(tmp_path):
    """`yolo-orch data import train.json --val val.json --images DIR --out OUT --link`."""
    import yaml

    from conftest import run_cli

    imgs = images(tmp_path / "images", 3)
    anns = [annotation(1, 100, 7), annotation(2, 101, 12)]
    train = write(tmp_path / "train.json", {"images": imgs, "annotations": anns, "categories": CUSTOM})
    val = write(tmp_path / "val.json", {"images": imgs[:1], "annotations": anns[:1], "categories": CUSTOM})
    r = run_cli("data", "import", train, "--val", val, "--images", tmp_path / "images", "--out", tmp_path / "yolo",
                "--link", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "imported 3 train + 1 val detect images, 3 classes" in r.stdout
    assert "1 images without annotations (background)" in r.stdout
    folder = tmp_path / "yolo"
    assert (folder / "images" / "train" / "img0.jpg").resolve() == tmp_path / "images" / "img0.jpg"
    assert yaml.safe_load((folder / "data.yaml").read_text())["names"] == {0: "scratch", 1: "dent", 2: "rust"}
    r = run_cli("data", "import", train, "--out", tmp_path / "other", cwd=tmp_path)
    assert r.returncode == 2 and "needs --val VAL.json and --images FOLDER" in r.stderr


def test_rle_masks_compressed_or_not_are_traced_to_their_outline(tmp_path):
    from orchestrator.jobspec.coco_convert import convert
    from orchestrator.jobspec.rle import rle_counts

    from orchestrator.harness.annotations import box_mask, rle_of_mask

    square = box_mask(W, H, 8, 10, 40, 30)
    plain, packed = rle_of_mask(square, compressed=False), rle_of_mask(square)
    assert isinstance(packed["counts"], str) and rle_counts(packed) == plain["counts"]
    imgs = images(tmp_path / "images", 2)
    anns = [annotation(1, 100, 7, bbox=(8, 10, 32, 20), segmentation=packed),
            annotation(2, 101, 3, bbox=(8, 10, 32, 20), segmentation=plain)]
    ann = write(tmp_path / "seg.json", {"images": imgs, "annotations": anns, "categories": CUSTOM})
    splits = {"train": (ann, tmp_path / "images"), "val": (ann, tmp_path / "images")}
    data = read_coco(splits)
    assert data.task == "segment"
    from orchestrator.jobspec.coco_convert import converted_yaml

    made = convert(splits, "segment", converted_yaml(tmp_path / "cache", data))
    for name in ("img0", "img1"):
        values = [float(v) for v in (made.parent / "labels" / "train" / f"{name}.txt").read_text().split()[1:]]
        xs, ys = values[0::2], values[1::2]  # the traced outline: the square's corner pixels, normalised
        assert (min(xs), max(xs), min(ys), max(ys)) == pytest.approx((8 / W, 39 / W, 10 / H, 29 / H), abs=1e-4)


@pytest.mark.parametrize("segmentation, why", [
    ({"size": [H + 1, W], "counts": [H * W + W]}, f"its size [{H + 1}, {W}] is not its image's [{H}, {W}]"),
    ({"size": [H, W], "counts": [10, 20]}, f"its runs cover 30 pixels, not the image's {H * W}"),
    ({"size": [H, W], "counts": "a b"}, "' ' is not a character of compressed counts"),
    ({"size": "64x48", "counts": [H * W]}, "its size '64x48' is not [height, width]"),
])
def test_an_rle_mask_that_cannot_be_its_images_is_named(tmp_path, segmentation, why):
    imgs = images(tmp_path / "images", 1)
    ann = write(tmp_path / "seg.json", {"images": imgs, "annotations": [annotation(5, 100, 7, segmentation=segmentation)],
                                       "categories": CUSTOM})
    with pytest.raises(UserError) as err:
        read_coco({"train": (ann, tmp_path / "images")})
    assert err.value.problems == [f"data.coco.train: {ann}: annotation 5: its RLE mask cannot be read ({why})"]
