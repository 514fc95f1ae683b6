"""Deterministic synthetic datasets ("synth-shapes") for every Ultralytics task, in its format.

Filled geometric shapes (one class per shape kind, data/shapes.py) on a noisy background. Colour is
drawn independently of the class, so a model has to learn shape, not colour. `first_class` and `style`
make another visual domain (other shapes on striped backgrounds in saturated colours): the stand-in
for a user's own data when a model pretrained on the default domain is fine-tuned. Detection-style tasks
have 1-4 objects per image, each 15-50 % of the image side, whose boxes never overlap, so every
label describes a fully visible object. Labels per task (Ultralytics' formats, coordinates 0..1):

    detect    class cx cy w h                       the tight box of the drawn pixels
    segment   class x1 y1 x2 y2 ...                 the shape's outline polygon (a ring: its outer edge)
    pose      class cx cy w h  x y 2 (x 4)          the shape's top, right, bottom and left extreme points
                                                    (kpt_shape [4, 3], flip_idx [0, 3, 2, 1])
    obb       class x1 y1 x2 y2 x3 y3 x4 y4         the shape drawn rotated: the corners of its rotated box
    classify  (no label files)                      one shape per image, 40-80 % of the side, in a folder
                                                    per class; classes balanced (image i has class i % nc)
    semantic  masks/SPLIT/NNNNNN.png                a class id per pixel (8-bit): 0 the background, 1..nc
                                                    the shapes, 255 (ignored) on each shape's anti-aliased edge
    depth     depth/SPLIT/NNNNNN.png                metres x 1000 per pixel (16-bit, depth_scale 1000): the
                                                    background recedes from 3 m (bottom) to 8 m (top), each
                                                    shape stands at 0.45 m / its size (0.9-3 m); the image
                                                    is shaded by depth (nearer is brighter), so it
                                                    determines the map

Layout written under ``out_dir``::

    images/train/000000.png ...   labels/train/000000.txt ...     (classify: train/<class>/000000.png)
    images/val/000000.png ...     labels/val/000000.txt ...       (classify: val/<class>/000000.png)
                                  (semantic: masks/, depth: depth/ instead of labels/)
    data.yaml                     (path: <absolute out_dir>, train, val, nc, names; pose: kpt_shape, flip_idx;
                                   semantic: masks_dir, names background + the shapes; depth: depth_scale)
    synth.json                    (manifest: generator version + config; written last)

A classify dataset is the folder itself (Ultralytics' classify `data` is a folder); it holds no data.yaml.

Guarantees:

- Deterministic: the same arguments give byte-identical images and labels (and the same
  ``data.yaml`` for the same ``out_dir``). Each image has its own random stream derived
  from ``(seed, split, index)``, so image ``i`` of a split does not depend on how many
  images the split holds. PNG (lossless, no metadata) is used for the images.
- Atomic: the dataset is built in a temporary folder beside ``out_dir`` and renamed into
  place at the end; an interrupted run never leaves a half dataset at ``out_dir``.
- Reusable: if ``out_dir`` already holds a complete dataset with the same config (its
  ``synth.json`` matches), it is returned without regenerating anything.

Only numpy and Pillow are needed: no torch, no Ultralytics, no PyYAML.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from orchestrator.data import SYNTH_MAX_IMAGES, SYNTH_MAX_IMGSZ, dataset_path, synth_nc
from orchestrator.tasks import TASKS
from orchestrator.data import shapes
from orchestrator.data.shapes import SHAPE_NAMES

__all__ = [
    "GENERATOR_VERSION",
    "MANIFEST_NAME",
    "SHAPE_NAMES",
    "MAX_CLASSES",
    "TASKS",
    "SynthConfig",
    "generate_dataset",
    "load_manifest",
]

# Bump when the pixels or labels produced for a given config change, so that old
# datasets on disk are regenerated instead of being reused.
GENERATOR_VERSION = 1
MANIFEST_NAME = "synth.json"

# Data design constants (part of the generator version).
_MIN_OBJECTS, _MAX_OBJECTS = 1, 4
_CLASSIFY_SIZES = (0.4, 0.8)  # classify: one shape per image, this fraction of the image side
MAX_CLASSES = len(SHAPE_NAMES)
POSE_KPT_SHAPE = [4, 3]  # top, right, bottom, left; x, y, visibility
POSE_FLIP_IDX = [0, 3, 2, 1]  # a horizontal flip swaps right and left
_SPLITS = ("train", "val")
SEMANTIC_BACKGROUND = "background"  # class 0 of a semantic dataset; the shapes are 1..classes
IGNORE = 255  # Ultralytics' ignore label in a semantic mask
DEPTH_SCALE = 1000  # a depth PNG's value per metre (Ultralytics' default depth_scale)
_FLOOR_DEPTH = (3.0, 8.0)  # metres at the image's bottom and top row
_SHAPE_DEPTH = 0.45  # metres x the shape's size (fraction of the side): a larger shape is nearer
_SHADE_AT = 0.9  # metres where shading is 1; farther pixels are darker, as sqrt(_SHADE_AT / depth)
# The folder of each task's per-image targets (beside images/); classify has none.
TARGETS = {"semantic": "masks", "depth": "depth"}


@dataclass(frozen=True)
class SynthConfig:
    """Everything that determines the generated files (besides GENERATOR_VERSION)."""

    images: int = 128
    val_images: int = 32
    classes: int = 3
    imgsz: int = 128
    seed: int = 0
    task: str = "detect"
    first_class: int = 0  # the classes are shapes first_class .. first_class + classes - 1 (SHAPE_NAMES)
    style: str = "plain"  # the look (shapes.STYLES); another style and other shapes make another domain

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task: expected one of {', '.join(TASKS)} (got {self.task!r})")
        _check_int("images", self.images, 1, SYNTH_MAX_IMAGES)
        _check_int("val_images", self.val_images, 1, SYNTH_MAX_IMAGES)
        _check_int("classes", self.classes, 1, MAX_CLASSES)
        _check_int("imgsz", self.imgsz, 32, SYNTH_MAX_IMGSZ)
        _check_int("seed", self.seed, 0)
        _check_int("first_class", self.first_class, 0, MAX_CLASSES - self.classes)
        if self.style not in shapes.STYLES:
            raise ValueError(f"style: expected one of {', '.join(shapes.STYLES)} (got {self.style!r})")
        if self.task == "classify":  # torchvision's ImageFolder refuses a class folder with no image
            for name in ("images", "val_images"):
                if getattr(self, name) < self.classes:
                    raise ValueError(f"{name}: a classify dataset needs at least one image per class "
                                     f"({self.classes}; got {getattr(self, name)})")

    @property
    def names(self) -> list[str]:
        return list(SHAPE_NAMES[self.first_class: self.first_class + self.classes])

    def stream(self, split: str, index: int) -> list[int]:
        """The seed of image `index`'s random stream; the default domain's is what it always was."""
        seed = [self.seed, _SPLITS.index(split), index, self.classes, self.imgsz]
        return seed if self.domain() == {} else seed + [self.first_class, shapes.STYLES.index(self.style)]

    def domain(self) -> dict:
        """The domain fields that differ from the default (none: the manifest of earlier versions)."""
        return {k: v for k, v in (("first_class", self.first_class), ("style", self.style))
                if v != SynthConfig.__dataclass_fields__[k].default}

    def count(self, split: str) -> int:
        return self.images if split == "train" else self.val_images

    def manifest(self) -> dict:
        return {
            "generator": "yolo-orch synth-shapes",
            "version": GENERATOR_VERSION,
            "config": {k: v for k, v in asdict(self).items() if k not in ("first_class", "style")} | self.domain(),
            "names": self.names,
        }


def _check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: must be an integer (got {value!r})")
    if value < lo:
        raise ValueError(f"{name}: must be at least {lo} (got {value})")
    if hi is not None and value > hi:
        raise ValueError(f"{name}: must be at most {hi} (got {value})")


# --------------------------------------------------------------------------- labels


def _render(cfg: SynthConfig, split: str, index: int) -> tuple[Image.Image, list[str], int, np.ndarray | None]:
    """One image, its label lines, its class (classify; -1 otherwise) and its per-pixel target (semantic: the
    class ids, depth: metres; None otherwise); depends only on (cfg, split, index)."""
    size = cfg.imgsz
    rng = np.random.default_rng(cfg.stream(split, index))
    img, avoid = shapes.background(rng, size, cfg.style)
    classify = cfg.task == "classify"
    target = _target_background(cfg.task, size)
    n = 1 if classify else int(rng.integers(_MIN_OBJECTS, _MAX_OBJECTS + 1))
    boxes: list[shapes.Box] = []
    lines: list[str] = []
    for _ in range(n):
        box = shapes.place(rng, size, boxes, _CLASSIFY_SIZES if classify else (shapes.MIN_SIZE, shapes.MAX_SIZE))
        if box is None:
            continue
        cls = index % cfg.classes if classify else int(rng.integers(0, cfg.classes))
        angle = float(rng.uniform(0.0, 180.0)) if cfg.task == "obb" else 0.0
        drawn = shapes.inner_box(box) if cfg.task == "obb" else box  # any rotation of it stays in the box
        mask, outline = shapes.draw_shape(cfg.names[cls], drawn, size, rng, angle)
        m = np.asarray(mask, dtype=np.float32)[..., None] / 255.0
        colour = shapes.random_colour(rng, avoid, cfg.style)
        img = img * (1 - m) + colour[None, None, :] * m
        label = _label(cfg.task, cls, np.asarray(mask) > 0, outline, drawn, angle, size)
        if label is None:  # no visible pixel: cannot happen for boxes >= 15 % of imgsz >= 32; be safe
            continue
        _draw_target(cfg.task, target, np.asarray(mask), cls, box, size)
        boxes.append(box)
        lines.append(label)
    if cfg.task == "depth":
        img = img * _shading(target)[..., None]
    img = img + rng.normal(0.0, shapes.NOISE_SIGMA, size=img.shape)
    arr = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return Image.fromarray(arr, "RGB"), lines, (index % cfg.classes if classify else -1), target


def _target_background(task: str, size: int) -> np.ndarray | None:
    """A semantic mask all background, or the depth of the receding floor (far at the top); else None."""
    if task == "semantic":
        return np.zeros((size, size), np.uint8)
    if task == "depth":
        near, far = _FLOOR_DEPTH
        rows = np.linspace(far, near, size, dtype=np.float32)
        return np.repeat(rows[:, None], size, axis=1)
    return None


def _draw_target(task: str, target: np.ndarray | None, mask: np.ndarray, cls: int, box, size: int) -> None:
    """One shape into the per-pixel target: its class id (the anti-aliased edge ignored), or its depth."""
    if task == "semantic":
        target[mask == 255] = cls + 1
        target[(mask > 0) & (mask < 255)] = IGNORE
    elif task == "depth":
        side = max(box[2] - box[0], box[3] - box[1]) / size
        target[mask >= 128] = _SHAPE_DEPTH / side


def _shading(depth: np.ndarray) -> np.ndarray:
    return np.minimum(1.0, np.sqrt(_SHADE_AT / depth)).astype(np.float32)


def _label(task: str, cls: int, pixels: np.ndarray, outline, drawn, angle: float, size: int) -> str | None:
    """The task's label line for one drawn shape (module docstring: the formats)."""
    ys, xs = np.nonzero(pixels)
    if xs.size == 0:
        return None
    bx0, bx1, by0, by1 = int(xs.min()), int(xs.max()) + 1, int(ys.min()), int(ys.max()) + 1
    box = f"{(bx0 + bx1) / 2 / size:.6f} {(by0 + by1) / 2 / size:.6f} {(bx1 - bx0) / size:.6f} {(by1 - by0) / size:.6f}"
    if task == "segment":
        return f"{cls} {_coords(outline, size)}"
    if task == "pose":
        return f"{cls} {box} " + " ".join(f"{x / size:.6f} {y / size:.6f} 2" for x, y in _extremes(xs, ys))
    if task == "obb":
        x0, y0, x1, y1 = drawn
        corners = shapes.rotate_points([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], ((x0 + x1) / 2, (y0 + y1) / 2), angle)
        return f"{cls} {_coords(corners, size)}"
    return f"{cls} {box}"


def _coords(points, size: int) -> str:
    return " ".join(f"{min(max(v / size, 0.0), 1.0):.6f}" for point in points for v in point)


def _extremes(xs: np.ndarray, ys: np.ndarray) -> list[tuple[float, float]]:
    """The shape's top, right, bottom and left keypoints: the middle of its extreme row or column of
    pixels (pixel centres), so a flat edge gives its midpoint, not an arbitrary corner."""
    top, bottom, left, right = ys.min(), ys.max(), xs.min(), xs.max()
    return [(float(xs[ys == top].mean()) + 0.5, top + 0.5), (right + 0.5, float(ys[xs == right].mean()) + 0.5),
            (float(xs[ys == bottom].mean()) + 0.5, bottom + 0.5), (left + 0.5, float(ys[xs == left].mean()) + 0.5)]


# --------------------------------------------------------------------------- files


def load_manifest(out_dir: Path) -> dict | None:
    """The manifest of a complete dataset at `out_dir`, or None."""
    try:
        return json.loads((Path(out_dir) / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None


def _looks_complete(out_dir: Path, cfg: SynthConfig) -> bool:
    """Cheap check that no file of a manifest-bearing dataset went missing."""
    if cfg.task == "classify":
        return all((out_dir / split).is_dir() and cfg.count(split) == sum(
            len(os.listdir(d)) for d in (out_dir / split).iterdir() if d.is_dir()) for split in _SPLITS)
    if not (out_dir / "data.yaml").is_file():
        return False
    for split in _SPLITS:
        for kind in ("images", TARGETS.get(cfg.task, "labels")):
            try:
                if len(os.listdir(out_dir / kind / split)) != cfg.count(split):
                    return False
            except OSError:
                return False
    return True


def _data_yaml_text(out_dir: Path, cfg: SynthConfig) -> str:
    # Written by hand (no PyYAML needed) with JSON-quoted strings, which are valid YAML.
    lines = [
        f"# Synthetic shapes {cfg.task} dataset, generated by orchestrator.data.synth",
        f"# config: {json.dumps(cfg.manifest()['config'], sort_keys=True)}",
        f"path: {json.dumps(str(out_dir))}",
        "train: images/train",
        "val: images/val",
    ]
    names = cfg.names
    if cfg.task == "pose":
        lines += [f"kpt_shape: {POSE_KPT_SHAPE}", f"flip_idx: {POSE_FLIP_IDX}"]
    if cfg.task == "semantic":
        lines += [f"masks_dir: {TARGETS['semantic']}"]
        names = [SEMANTIC_BACKGROUND, *names]
    if cfg.task == "depth":
        lines += [f"depth_scale: {DEPTH_SCALE}"]
        names = ["depth"]  # one output: metres per pixel
    assert len(names) == synth_nc(cfg.task, cfg.classes)  # the plan's count (data/__init__.py) is this one
    lines.insert(5, f"nc: {len(names)}")
    lines += ["names:"] + [f"  {i}: {name}" for i, name in enumerate(names)]
    return "\n".join(lines) + "\n"


def _write_all(tmp: Path, final: Path, cfg: SynthConfig) -> None:
    for split in _SPLITS:
        if cfg.task == "classify":
            for name in cfg.names:
                (tmp / split / name).mkdir(parents=True)
        else:
            (tmp / "images" / split).mkdir(parents=True)
            (tmp / TARGETS.get(cfg.task, "labels") / split).mkdir(parents=True)
        for i in range(cfg.count(split)):
            image, lines, cls, target = _render(cfg, split, i)
            if cfg.task == "classify":
                image.save(tmp / split / cfg.names[cls] / f"{i:06d}.png", format="PNG", compress_level=6)
                continue
            image.save(tmp / "images" / split / f"{i:06d}.png", format="PNG", compress_level=6)
            if target is not None:
                _target_image(cfg.task, target).save(tmp / TARGETS[cfg.task] / split / f"{i:06d}.png", format="PNG",
                                                     compress_level=6)
                continue
            (tmp / "labels" / split / f"{i:06d}.txt").write_text("".join(line + "\n" for line in lines))
    if cfg.task != "classify":
        (tmp / "data.yaml").write_text(_data_yaml_text(final, cfg))
    # The manifest is written last: its presence marks a complete dataset.
    (tmp / MANIFEST_NAME).write_text(json.dumps(cfg.manifest(), indent=2, sort_keys=True) + "\n")


def _target_image(task: str, target: np.ndarray) -> Image.Image:
    """A semantic mask as an 8-bit grey PNG; a depth map as a 16-bit one (millimetres)."""
    if task == "depth":
        return Image.fromarray(np.clip(np.rint(target * DEPTH_SCALE), 1, 65535).astype(np.uint16))
    return Image.fromarray(target, "L")


def generate_dataset(
    out_dir: Path | str,
    images: int = 128,
    val_images: int = 32,
    classes: int = 3,
    imgsz: int = 128,
    seed: int = 0,
    task: str = "detect",
    first_class: int = 0,
    style: str = "plain",
) -> Path:
    """Generate (or reuse) the synthetic dataset at `out_dir` for `task`; return what a job's `data`
    names: its data.yaml, or the folder for classify (dataset_path).

    Raises ValueError for bad arguments (the message starts with the argument's name)
    and FileExistsError if `out_dir` exists, is not empty and is not a synth dataset.
    """
    cfg = SynthConfig(images=images, val_images=val_images, classes=classes, imgsz=imgsz, seed=seed, task=task,
                      first_class=first_class, style=style)
    out_dir = Path(out_dir).expanduser().absolute()
    data_yaml = dataset_path(out_dir, task)

    if load_manifest(out_dir) == cfg.manifest() and _looks_complete(out_dir, cfg):
        return data_yaml
    if out_dir.exists():
        if not out_dir.is_dir():
            raise FileExistsError(f"out_dir: {out_dir} exists and is not a directory")
        if any(out_dir.iterdir()) and load_manifest(out_dir) is None:
            raise FileExistsError(
                f"out_dir: {out_dir} is not empty and holds no {MANIFEST_NAME}; "
                "refusing to overwrite it"
            )

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        _write_all(tmp, out_dir, cfg)
        _install(tmp, out_dir, cfg)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return data_yaml


def _install(tmp: Path, out_dir: Path, cfg: SynthConfig) -> None:
    """Move the finished `tmp` folder to `out_dir`, replacing an old synth dataset."""
    old = None
    if out_dir.exists():
        # An empty folder or an older synth dataset (checked by the caller): move it
        # aside first, since a directory cannot be renamed over a non-empty one.
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        try:
            os.replace(out_dir, old / "d")
        except FileNotFoundError:
            pass  # removed concurrently
    try:
        os.replace(tmp, out_dir)
    except OSError:
        # Someone else installed a dataset meanwhile; fine if it is the one we want.
        if load_manifest(out_dir) != cfg.manifest():
            raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m orchestrator.data.synth OUT_DIR [--images N ...]``: print the data.yaml path."""
    import argparse

    d = SynthConfig()
    ap = argparse.ArgumentParser(prog="python -m orchestrator.data.synth", description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--images", type=int, default=d.images, help="train images (default %(default)s)")
    ap.add_argument("--val-images", type=int, default=d.val_images, help="val images (default %(default)s)")
    ap.add_argument("--classes", type=int, default=d.classes, help=f"1..{MAX_CLASSES} (default %(default)s)")
    ap.add_argument("--imgsz", type=int, default=d.imgsz, help="image side in pixels (default %(default)s)")
    ap.add_argument("--seed", type=int, default=d.seed, help="(default %(default)s)")
    ap.add_argument("--task", default=d.task, choices=TASKS, help="(default %(default)s)")
    ap.add_argument("--first-class", type=int, default=d.first_class,
                    help="the first shape of the classes (default %(default)s: rectangle)")
    ap.add_argument("--style", default=d.style, choices=shapes.STYLES, help="the look (default %(default)s)")
    a = ap.parse_args(argv)
    try:
        path = generate_dataset(a.out_dir, a.images, a.val_images, a.classes, a.imgsz, a.seed, a.task,
                                a.first_class, a.style)
    except (ValueError, FileExistsError) as e:
        ap.error(str(e))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
