"""Tests for the synthetic shapes dataset generator (fast: no training, no torch)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from orchestrator.data import synth
from orchestrator.data.synth import MANIFEST_NAME, SHAPE_NAMES, SynthConfig, generate_dataset

SMALL = dict(images=12, val_images=4, classes=3, imgsz=64, seed=0)


def _tree_digest(root: Path, skip=("data.yaml",)) -> dict[str, str]:
    """sha256 of every file under root, by relative path (data.yaml holds the abs path)."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in skip
    }


def _labels(root: Path, split: str) -> dict[str, list[list[str]]]:
    return {
        p.stem: [line.split() for line in p.read_text().splitlines()]
        for p in sorted((root / "labels" / split).glob("*.txt"))
    }


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("synth") / "ds", **SMALL)


# ----------------------------------------------------------------- determinism


def test_same_args_byte_identical(tmp_path, small):
    other = generate_dataset(tmp_path / "other", **SMALL)
    a, b = _tree_digest(small.parent), _tree_digest(other.parent)
    assert a == b
    assert len(a) == 2 * (SMALL["images"] + SMALL["val_images"]) + 1  # + synth.json


def test_data_yaml_identical_for_same_out_dir(tmp_path):
    p1 = generate_dataset(tmp_path / "d", **SMALL)
    text1 = p1.read_bytes()
    shutil.rmtree(tmp_path / "d")
    p2 = generate_dataset(tmp_path / "d", **SMALL)
    assert p2.read_bytes() == text1


def test_different_seed_differs(tmp_path, small):
    other = generate_dataset(tmp_path / "s1", **{**SMALL, "seed": 1})
    a, b = _tree_digest(small.parent), _tree_digest(other.parent)
    assert a.keys() == b.keys()
    images = [k for k in a if k.startswith("images/")]
    assert all(a[k] != b[k] for k in images)


def test_image_does_not_depend_on_split_size(tmp_path, small):
    bigger = generate_dataset(tmp_path / "big", **{**SMALL, "images": SMALL["images"] + 3})
    a, b = _tree_digest(small.parent), _tree_digest(bigger.parent)
    for k, v in a.items():
        if k.startswith(("images/", "labels/")):
            assert b[k] == v, k


def test_deterministic_across_processes(tmp_path, small):
    """A fresh interpreter (new hash seed) produces the same bytes."""
    code = (
        "import sys; from orchestrator.data.synth import generate_dataset; "
        f"generate_dataset(sys.argv[1], **{SMALL!r})"
    )
    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "p")], check=True, cwd=repo)
    assert _tree_digest(tmp_path / "p") == _tree_digest(small.parent)


# ----------------------------------------------------------------- contents


def test_counts_and_pairs(small):
    root = small.parent
    for split, n in (("train", SMALL["images"]), ("val", SMALL["val_images"])):
        imgs = sorted(p.stem for p in (root / "images" / split).iterdir())
        lbls = sorted(p.stem for p in (root / "labels" / split).iterdir())
        assert len(imgs) == n
        assert imgs == lbls


def test_images_are_rgb_imgsz(small):
    for p in (small.parent / "images").rglob("*.png"):
        with Image.open(p) as im:
            assert im.mode == "RGB"
            assert im.size == (SMALL["imgsz"], SMALL["imgsz"])


@pytest.mark.parametrize("classes", [1, 3, 8])
def test_labels_valid(tmp_path, classes):
    imgsz = 96
    root = generate_dataset(tmp_path / "d", images=40, val_images=8, classes=classes, imgsz=imgsz).parent
    seen = set()
    for split in ("train", "val"):
        for stem, rows in _labels(root, split).items():
            assert 1 <= len(rows) <= 4, stem
            boxes = []
            for row in rows:
                assert len(row) == 5
                assert row[0].isdigit()
                cls = int(row[0])
                assert 0 <= cls < classes
                seen.add(cls)
                cx, cy, w, h = (float(v) for v in row[1:])
                for v in row[1:]:
                    assert len(v.split(".")[1]) == 6  # 6 decimals
                for v in (cx, cy, w, h):
                    assert 0.0 < v <= 1.0
                x0, x1, y0, y1 = cx - w / 2, cx + w / 2, cy - h / 2, cy + h / 2
                eps = 1e-6
                assert x0 >= -eps and y0 >= -eps and x1 <= 1 + eps and y1 <= 1 + eps
                # object size 15-50 % of the image side (within a pixel)
                px = 1.0 / imgsz
                assert 0.15 - px <= w <= 0.5 + px and 0.15 - px <= h <= 0.5 + px
                boxes.append((x0, y0, x1, y1))
            # no two boxes overlap
            for i in range(len(boxes)):
                for j in range(i + 1, len(boxes)):
                    a, b = boxes[i], boxes[j]
                    iw = min(a[2], b[2]) - max(a[0], b[0])
                    ih = min(a[3], b[3]) - max(a[1], b[1])
                    assert iw <= 0 or ih <= 0, (stem, a, b)
    assert seen == set(range(classes))  # every class appears


def test_objects_stand_out_from_background(small):
    """The middle of every box differs in colour from the pixels outside all boxes."""
    root = small.parent
    for stem, rows in _labels(root, "train").items():
        img = np.asarray(Image.open(root / "images" / "train" / f"{stem}.png"), dtype=np.float32)
        s = img.shape[0]
        outside = np.ones(img.shape[:2], bool)
        boxes = []
        for row in rows:
            cx, cy, w, h = (float(v) * s for v in row[1:])
            x0, y0, x1, y1 = round(cx - w / 2), round(cy - h / 2), round(cx + w / 2), round(cy + h / 2)
            outside[y0:y1, x0:x1] = False
            boxes.append((int(row[0]), cx, cy, w, h))
        bg = img[outside].mean(axis=0)
        for cls, cx, cy, w, h in boxes:
            assert SHAPE_NAMES[cls] != "ring"  # hollow in the middle; not in 3 classes
            crop = img[int(cy - h / 8) : int(cy + h / 8) + 1, int(cx - w / 8) : int(cx + w / 8) + 1]
            assert np.linalg.norm(crop.reshape(-1, 3).mean(axis=0) - bg) > 50, stem


def test_data_yaml(small):
    cfg = yaml.safe_load(small.read_text())
    root = Path(cfg["path"])
    assert root.is_absolute() and root == small.parent
    assert cfg["train"] == "images/train" and cfg["val"] == "images/val"
    assert cfg["nc"] == SMALL["classes"]
    assert cfg["names"] == {i: n for i, n in enumerate(SHAPE_NAMES[: SMALL["classes"]])}
    for key in ("train", "val"):
        assert (root / cfg[key]).is_dir()
        assert any((root / cfg[key]).iterdir())
        # Ultralytics finds labels by replacing /images/ with /labels/
        assert (root / cfg[key].replace("images", "labels")).is_dir()


def test_names_distinct_and_eight():
    assert len(SHAPE_NAMES) == len(set(SHAPE_NAMES)) == 8
    assert SHAPE_NAMES[:3] == ("rectangle", "ellipse", "triangle")


def test_relative_out_dir_gives_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    p = generate_dataset("rel", images=2, val_images=1, imgsz=32)
    assert p.is_absolute()
    assert yaml.safe_load(p.read_text())["path"] == str(tmp_path / "rel")


# ----------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(images=0), "images"),
        (dict(images=-3), "images"),
        (dict(val_images=0), "val_images"),
        (dict(classes=0), "classes"),
        (dict(classes=9), "classes"),
        (dict(imgsz=31), "imgsz"),
        (dict(seed=-1), "seed"),
        (dict(images=2.5), "images"),
        (dict(classes=True), "classes"),
        (dict(imgsz="128"), "imgsz"),
        (dict(first_class=6), "first_class"),
        (dict(first_class=-1), "first_class"),
        (dict(style="zebra"), "style"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, field):
    with pytest.raises(ValueError) as err:
        generate_dataset(tmp_path / "bad", **kwargs)
    assert str(err.value).startswith(f"{field}:")
    assert not (tmp_path / "bad").exists()
    assert list(tmp_path.iterdir()) == []  # no temp folder left either


def test_bad_argument_message_example():
    with pytest.raises(ValueError, match=r"^images: must be at least 1 \(got 0\)$"):
        SynthConfig(images=0)
    with pytest.raises(ValueError, match=r"^classes: must be at most 8 \(got 9\)$"):
        SynthConfig(classes=9)


# ----------------------------------------------------------------- atomic + reuse


def test_reuse_without_rewriting(tmp_path):
    p = generate_dataset(tmp_path / "d", **SMALL)
    mtimes = {q: q.stat().st_mtime_ns for q in p.parent.rglob("*")}
    t = time.perf_counter()
    p2 = generate_dataset(tmp_path / "d", **SMALL)
    assert time.perf_counter() - t < 0.5
    assert p2 == p
    assert {q: q.stat().st_mtime_ns for q in p.parent.rglob("*")} == mtimes


def test_other_config_regenerates(tmp_path):
    p = generate_dataset(tmp_path / "d", **SMALL)
    p2 = generate_dataset(tmp_path / "d", **{**SMALL, "images": 5})
    assert p2 == p
    assert len(list((tmp_path / "d" / "images" / "train").iterdir())) == 5
    assert sorted(x.name for x in tmp_path.iterdir()) == ["d"]  # no temp/old left


def test_dataset_with_missing_files_is_regenerated(tmp_path):
    p = generate_dataset(tmp_path / "d", **SMALL)
    before = _tree_digest(p.parent)
    (p.parent / "labels" / "train" / "000003.txt").unlink()
    (p.parent / "data.yaml").unlink()
    assert generate_dataset(tmp_path / "d", **SMALL) == p
    assert _tree_digest(p.parent) == before and p.is_file()


def test_corrupt_manifest_is_refused(tmp_path):
    p = generate_dataset(tmp_path / "d", **SMALL)
    (p.parent / MANIFEST_NAME).write_text("{truncated")
    # A folder whose manifest is unreadable is not ours to trust, nor to delete.
    with pytest.raises(FileExistsError, match="out_dir"):
        generate_dataset(tmp_path / "d", **SMALL)


def test_refuses_foreign_nonempty_dir(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "precious.txt").write_text("x")
    with pytest.raises(FileExistsError, match="out_dir"):
        generate_dataset(d, **SMALL)
    assert (d / "precious.txt").read_text() == "x"


def test_empty_existing_dir_is_used(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    p = generate_dataset(d, **SMALL)
    assert p.is_file()


def test_interrupted_run_leaves_nothing(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = synth._render

    def boom(cfg, split, index):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return real(cfg, split, index)

    monkeypatch.setattr(synth, "_render", boom)
    with pytest.raises(KeyboardInterrupt):
        generate_dataset(tmp_path / "d", **SMALL)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(synth, "_render", real)
    assert generate_dataset(tmp_path / "d", **SMALL).is_file()


def test_interrupted_regeneration_keeps_old_dataset(tmp_path, monkeypatch):
    p = generate_dataset(tmp_path / "d", **SMALL)
    before = _tree_digest(p.parent, skip=())

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr(synth, "_render", boom)
    with pytest.raises(RuntimeError):
        generate_dataset(tmp_path / "d", **{**SMALL, "seed": 7})
    assert _tree_digest(p.parent, skip=()) == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["d"]


def test_light_import():
    """The module imports without torch or ultralytics."""
    code = (
        "import sys; import orchestrator.data.synth; "
        "bad = {'torch', 'ultralytics', 'cv2'} & set(sys.modules); "
        "assert not bad, bad"
    )
    repo = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=repo)


def test_example_data_yaml_matches_generator(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    example = yaml.safe_load((repo / "datasets" / "synth-shapes.yaml").read_text())
    generated = yaml.safe_load(generate_dataset(tmp_path / "synth-shapes").read_text())
    assert example["path"] == "/tmp/yolo-orch/datasets/synth-shapes"
    assert {k: v for k, v in example.items() if k != "path"} == {
        k: v for k, v in generated.items() if k != "path"
    }


def test_module_cli(tmp_path):
    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "orchestrator.data.synth", str(tmp_path / "c"), "--images", "3",
           "--val-images", "2", "--imgsz", "32"]
    r = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=True)
    assert Path(r.stdout.strip()) == tmp_path / "c" / "data.yaml"
    r = subprocess.run(cmd[:4] + ["--classes", "9"], cwd=repo, capture_output=True, text=True)
    assert r.returncode == 2 and "classes: must be at most 8 (got 9)" in r.stderr


# ----------------------------------------------------------------- every task


@pytest.mark.parametrize("task,values", [("segment", None), ("pose", 5 + 12), ("obb", 9)])
def test_task_labels_have_the_task_format(tmp_path, task, values):
    """Each label line has the task's Ultralytics format, normalised coordinates, a valid class."""
    data = generate_dataset(tmp_path / task, **SMALL, task=task)
    cfg = yaml.safe_load(data.read_text())
    assert cfg["nc"] == 3 and (cfg.get("kpt_shape") == [4, 3]) == (task == "pose")
    lines = [line.split() for p in (data.parent / "labels" / "train").glob("*.txt") for line in p.read_text().splitlines()]
    assert lines
    for parts in lines:
        v = [float(x) for x in parts]
        coords = [c for i, c in enumerate(v[5:]) if i % 3 != 2] if task == "pose" else v[1:]
        assert v[0] in (0, 1, 2) and all(0.0 <= c <= 1.0 for c in coords)
        if values is None:  # a polygon: at least 3 points
            assert len(v) >= 7 and len(v) % 2 == 1
        else:
            assert len(v) == values


def test_obb_corners_enclose_the_drawn_shape(tmp_path):
    """The boxes are really rotated (an axis-aligned box has only 2 distinct x values); that the
    corners enclose the drawn pixels is checked on the rendering itself (test_obb_box_holds_pixels)."""
    data = generate_dataset(tmp_path / "obb", **SMALL, task="obb")
    rotated = 0
    for p in (data.parent / "labels" / "train").glob("*.txt"):
        for line in p.read_text().splitlines():
            v = [float(x) for x in line.split()][1:]
            xs = v[0::2]
            rotated += len({round(x, 3) for x in xs}) == 4  # an axis-aligned box has 2 distinct x values
    assert rotated > 0


def test_pose_keypoints_lie_on_the_shape_box(tmp_path):
    """Top/bottom keypoints on the box's top/bottom edge, left/right on its sides."""
    data = generate_dataset(tmp_path / "pose", **SMALL, task="pose")
    for p in (data.parent / "labels" / "train").glob("*.txt"):
        for line in p.read_text().splitlines():
            _, cx, cy, w, h, *k = [float(x) for x in line.split()]
            top, right, bottom, left = (k[i * 3:i * 3 + 2] for i in range(4))
            tol = 1.0 / SMALL["imgsz"]
            assert abs(top[1] - (cy - h / 2)) <= tol and abs(bottom[1] - (cy + h / 2)) <= tol
            assert abs(left[0] - (cx - w / 2)) <= tol and abs(right[0] - (cx + w / 2)) <= tol


def test_classify_is_a_folder_per_class(tmp_path):
    out = generate_dataset(tmp_path / "cls", **SMALL, task="classify")
    assert out == tmp_path / "cls" and not (out / "data.yaml").exists()
    for split, n in (("train", SMALL["images"]), ("val", SMALL["val_images"])):
        counts = {d.name: len(list(d.glob("*.png"))) for d in (out / split).iterdir()}
        assert set(counts) == set(SHAPE_NAMES[:3]) and sum(counts.values()) == n
        assert max(counts.values()) - min(counts.values()) <= 1  # balanced: image i has class i % nc
    assert generate_dataset(tmp_path / "cls", **SMALL, task="classify") == out  # reused


def test_classify_needs_an_image_per_class(tmp_path):
    with pytest.raises(ValueError, match="val_images: a classify dataset needs at least one image per class"):
        generate_dataset(tmp_path / "c", images=8, val_images=2, classes=3, imgsz=64, task="classify")


def test_detect_dataset_unchanged_by_the_task_code(small):
    """Every detect image and label byte is what the generator wrote before it learned the other
    tasks (digest taken from that version): cached datasets and measured numbers stay valid."""
    h = hashlib.sha256()
    root = small.parent
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.suffix in (".png", ".txt"):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    assert h.hexdigest() == "451e5b218a52be56af7196ca5b936fd7a22340f7056e1fe33d70112b3cb2e367"


def test_obb_box_holds_pixels():
    """Every pixel the rotated shape covers lies inside its labelled rotated box (to a pixel): the
    pixels, rotated back about the box centre, fall inside the unrotated box."""
    from orchestrator.data import shapes

    rng = np.random.default_rng(7)
    for kind in SHAPE_NAMES:
        drawn = shapes.inner_box((10, 12, 50, 44))
        mask, _ = shapes.draw_shape(kind, drawn, 64, rng, angle=33.0)
        ys, xs = np.nonzero(np.asarray(mask) > 127)
        x0, y0, x1, y1 = drawn
        assert len(ys) == len(xs)
        back = shapes.rotate_points(list(zip(xs + 0.5, ys + 0.5)), ((x0 + x1) / 2, (y0 + y1) / 2), -33.0)
        assert xs.size > 20, kind
        assert all(x0 - 1 <= x <= x1 + 1 and y0 - 1 <= y <= y1 + 1 for x, y in back), kind


def test_another_domain(tmp_path, small):
    """first_class and style make another visual domain (the fine-tuning bench's): other shape names,
    labels from 0, its own images, deterministic, and a manifest that names it; the default domain's
    manifest is the one earlier versions wrote (no domain keys), so cached datasets are reused."""
    kwargs = {**SMALL, "first_class": 4, "style": "striped"}
    other = generate_dataset(tmp_path / "b", **kwargs)
    assert yaml.safe_load(other.read_text())["names"] == {0: "star", 1: "diamond", 2: "ring"}
    assert {row[0] for rows in _labels(other.parent, "train").values() for row in rows} <= {"0", "1", "2"}
    manifest = synth.load_manifest(other.parent)
    assert (manifest["config"]["first_class"], manifest["config"]["style"]) == (4, "striped")
    assert set(synth.load_manifest(small.parent)["config"]) == {"images", "val_images", "classes", "imgsz", "seed",
                                                                "task"}
    a, b = _tree_digest(small.parent), _tree_digest(other.parent)
    assert all(a[k] != b[k] for k in a if k.startswith("images/"))
    assert _tree_digest(generate_dataset(tmp_path / "b2", **kwargs).parent) == b


def test_semantic_masks_are_class_ids_with_the_edges_ignored(tmp_path):
    """A mask per image, its size; ids 0 (background) .. nc-1 (the shapes) and 255 on anti-aliased edges; every
    shape's class appears; the data.yaml names the background first, as Ultralytics' SemanticDataset reads it."""
    data = generate_dataset(tmp_path / "sem", **SMALL, task="semantic")
    cfg = yaml.safe_load(data.read_text())
    assert cfg["masks_dir"] == "masks" and cfg["nc"] == 4 and cfg["names"][0] == "background"
    assert not (data.parent / "labels").exists()
    seen = set()
    for split, n in (("train", SMALL["images"]), ("val", SMALL["val_images"])):
        masks = sorted((data.parent / "masks" / split).glob("*.png"))
        assert [m.stem for m in masks] == [p.stem for p in sorted((data.parent / "images" / split).glob("*.png"))]
        assert len(masks) == n
        for m in masks:
            with Image.open(m) as im:
                assert im.mode == "L" and im.size == (SMALL["imgsz"],) * 2
                ids = set(np.unique(np.asarray(im)).tolist())
            assert ids <= {0, 1, 2, 3, 255} and 0 in ids and ids & {1, 2, 3}
            seen |= ids
    assert {1, 2, 3, 255} <= seen  # an axis-aligned rectangle has no anti-aliased edge; the other shapes do


def test_depth_maps_are_millimetres_the_image_determines(tmp_path):
    """A 16-bit PNG per image, metres x 1000: the floor recedes from 3 m (bottom) to 8 m (top); every other pixel
    is a shape's, nearer than the floor behind it."""
    data = generate_dataset(tmp_path / "depth", **SMALL, task="depth")
    cfg = yaml.safe_load(data.read_text())
    assert cfg["depth_scale"] == synth.DEPTH_SCALE == 1000 and cfg["nc"] == 1 and cfg["names"] == {0: "depth"}
    for m in sorted((data.parent / "depth" / "train").glob("*.png")):
        with Image.open(m) as im:
            assert im.mode == "I;16" and im.size == (SMALL["imgsz"],) * 2
            metres = np.asarray(im).astype(np.float32) / 1000
        assert metres.min() >= 0.9 and metres.max() <= 8.0
        floor = np.linspace(8.0, 3.0, SMALL["imgsz"], dtype=np.float32)[:, None]
        nearer = metres < floor - 0.01
        assert (np.isclose(metres, floor, atol=0.001) | nearer).all() and nearer.any(), m.name


def test_semantic_and_depth_are_deterministic_and_the_plan_counts_their_classes(tmp_path):
    from orchestrator.data import synth_nc

    for task in ("semantic", "depth"):
        a = generate_dataset(tmp_path / f"{task}-a", **SMALL, task=task)
        b = generate_dataset(tmp_path / f"{task}-b", **SMALL, task=task)
        assert _tree_digest(a.parent) == _tree_digest(b.parent)
        assert yaml.safe_load(a.read_text())["nc"] == synth_nc(task, SMALL["classes"])
