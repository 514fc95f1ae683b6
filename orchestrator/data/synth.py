"""Deterministic synthetic detection dataset ("synth-shapes") in Ultralytics YOLO format.

Filled geometric shapes (one class per shape kind) on a noisy background. Colour is drawn
independently of the class, so a model has to learn shape, not colour. Objects are
1-4 per image, each 15-50 % of the image side, and their boxes never overlap, so every
label describes a fully visible object.

Layout written under ``out_dir``::

    images/train/000000.png ...   labels/train/000000.txt ...
    images/val/000000.png ...     labels/val/000000.txt ...
    data.yaml                     (path: <absolute out_dir>, train, val, nc, names)
    synth.json                    (manifest: generator version + config; written last)

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
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from orchestrator.data import SYNTH_MAX_IMAGES, SYNTH_MAX_IMGSZ

__all__ = [
    "GENERATOR_VERSION",
    "MANIFEST_NAME",
    "SHAPE_NAMES",
    "MAX_CLASSES",
    "SynthConfig",
    "generate_dataset",
    "load_manifest",
]

# Bump when the pixels or labels produced for a given config change, so that old
# datasets on disk are regenerated instead of being reused.
GENERATOR_VERSION = 1
MANIFEST_NAME = "synth.json"

# Class id -> shape kind. `classes=k` uses the first k.
SHAPE_NAMES: tuple[str, ...] = (
    "rectangle",
    "ellipse",
    "triangle",
    "cross",
    "star",
    "diamond",
    "ring",
    "hexagon",
)
MAX_CLASSES = len(SHAPE_NAMES)

# Data design constants (part of the generator version).
_MIN_OBJECTS, _MAX_OBJECTS = 1, 4
_MIN_SIZE, _MAX_SIZE = 0.15, 0.50  # object box side, fraction of the image side
_MAX_ASPECT = 1.4  # long side / short side of an object box
_GAP = 2  # pixels kept free between two object boxes
_PLACE_TRIES = 40  # random placements tried per object before giving up on it
_SUPERSAMPLE = 4  # shapes are drawn at this scale and downsampled (anti-aliased edges)
_NOISE_SIGMA = 18.0  # per-pixel Gaussian noise over the whole image
_BG_GRADIENT = 40.0  # spread (per channel) between the two background gradient colours
_MIN_CONTRAST = 110.0  # min RGB distance between an object colour and the background mean
_SPLITS = ("train", "val")


@dataclass(frozen=True)
class SynthConfig:
    """Everything that determines the generated files (besides GENERATOR_VERSION)."""

    images: int = 128
    val_images: int = 32
    classes: int = 3
    imgsz: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        _check_int("images", self.images, 1, SYNTH_MAX_IMAGES)
        _check_int("val_images", self.val_images, 1, SYNTH_MAX_IMAGES)
        _check_int("classes", self.classes, 1, MAX_CLASSES)
        _check_int("imgsz", self.imgsz, 32, SYNTH_MAX_IMGSZ)
        _check_int("seed", self.seed, 0)

    @property
    def names(self) -> list[str]:
        return list(SHAPE_NAMES[: self.classes])

    def count(self, split: str) -> int:
        return self.images if split == "train" else self.val_images

    def manifest(self) -> dict:
        return {
            "generator": "yolo-orch synth-shapes",
            "version": GENERATOR_VERSION,
            "config": asdict(self),
            "names": self.names,
        }


def _check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: must be an integer (got {value!r})")
    if value < lo:
        raise ValueError(f"{name}: must be at least {lo} (got {value})")
    if hi is not None and value > hi:
        raise ValueError(f"{name}: must be at most {hi} (got {value})")


# --------------------------------------------------------------------------- drawing


def _polygon(kind: str, x0: float, y0: float, x1: float, y1: float, rng: np.random.Generator):
    """Vertices of a polygonal shape filling the box [x0, x1] x [y0, y1]."""
    w, h = x1 - x0, y1 - y0
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    if kind == "triangle":
        # Isosceles, apex up or down (random), base on the opposite box edge.
        if rng.random() < 0.5:
            return [(cx, y0), (x1, y1), (x0, y1)]
        return [(x0, y0), (x1, y0), (cx, y1)]
    if kind == "diamond":
        return [(cx, y0), (x1, cy), (cx, y1), (x0, cy)]
    if kind == "hexagon":
        # Pointy sides left/right; x at 0, 1/4, 3/4, 1 of the width.
        return [
            (x0, cy), (x0 + w / 4, y0), (x1 - w / 4, y0),
            (x1, cy), (x1 - w / 4, y1), (x0 + w / 4, y1),
        ]
    if kind == "star":
        # Five-pointed star, point up, scaled to fill the box exactly.
        outer, inner = 1.0, 0.45
        pts = []
        for k in range(10):
            r = outer if k % 2 == 0 else inner
            a = -math.pi / 2 + k * math.pi / 5
            pts.append((r * math.cos(a), r * math.sin(a)))
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        mx0, mx1, my0, my1 = min(xs), max(xs), min(ys), max(ys)
        return [
            (x0 + (px - mx0) / (mx1 - mx0) * w, y0 + (py - my0) / (my1 - my0) * h)
            for px, py in pts
        ]
    if kind == "cross":
        t = rng.uniform(0.28, 0.4)  # bar thickness, fraction of the side
        ax0, ax1 = cx - w * t / 2, cx + w * t / 2
        ay0, ay1 = cy - h * t / 2, cy + h * t / 2
        return [
            (ax0, y0), (ax1, y0), (ax1, ay0), (x1, ay0), (x1, ay1), (ax1, ay1),
            (ax1, y1), (ax0, y1), (ax0, ay1), (x0, ay1), (x0, ay0), (ax0, ay0),
        ]
    raise AssertionError(kind)


def _draw_mask(kind: str, box: tuple[int, int, int, int], size: int, rng) -> Image.Image:
    """Supersampled 8-bit mask (size*S square) of one shape filling `box` (pixel edges)."""
    s = _SUPERSAMPLE
    mask = Image.new("L", (size * s, size * s), 0)
    d = ImageDraw.Draw(mask)
    x0, y0, x1, y1 = (v * s for v in box)
    # PIL fills inclusive pixel ranges: the last filled pixel is x1-1.
    hx1, hy1 = x1 - 1, y1 - 1
    if kind == "rectangle":
        d.rectangle([x0, y0, hx1, hy1], fill=255)
    elif kind == "ellipse":
        d.ellipse([x0, y0, hx1, hy1], fill=255)
    elif kind == "ring":
        d.ellipse([x0, y0, hx1, hy1], fill=255)
        t = rng.uniform(0.45, 0.6)  # hole size relative to the outer ellipse
        w, h = x1 - x0, y1 - y0
        ix0, iy0 = x0 + w * (1 - t) / 2, y0 + h * (1 - t) / 2
        d.ellipse([ix0, iy0, ix0 + w * t, iy0 + h * t], fill=0)
    else:
        d.polygon(_polygon(kind, x0, y0, hx1, hy1, rng), fill=255)
    return mask.resize((size, size), Image.Resampling.BOX)


def _random_colour(rng: np.random.Generator, avoid: np.ndarray) -> np.ndarray:
    for _ in range(100):
        c = rng.integers(0, 256, size=3).astype(np.float32)
        if np.linalg.norm(c - avoid) >= _MIN_CONTRAST:
            return c
    # Fallback: the colour opposite the background, always far enough.
    return 255.0 - np.round(avoid)


def _background(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Float RGB background (a two-colour linear gradient) and its mean colour."""
    c0 = rng.integers(0, 256, size=3).astype(np.float32)
    c1 = np.clip(c0 + rng.normal(0.0, _BG_GRADIENT, size=3), 0, 255).astype(np.float32)
    a = rng.uniform(0, 2 * math.pi)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / max(size - 1, 1)
    t = (np.cos(a) * xx + np.sin(a) * yy)
    t = (t - t.min()) / max(float(t.max() - t.min()), 1e-6)
    img = c0[None, None, :] * (1 - t[..., None]) + c1[None, None, :] * t[..., None]
    return img, (c0 + c1) / 2


def _place(rng: np.random.Generator, size: int, boxes: list[tuple[int, int, int, int]]):
    """A random box (pixel edges x0, y0, x1, y1) not within _GAP of any box in `boxes`."""
    lo, hi = max(2, round(_MIN_SIZE * size)), round(_MAX_SIZE * size)
    for _ in range(_PLACE_TRIES):
        w = int(rng.integers(lo, hi + 1))
        aspect = rng.uniform(1 / _MAX_ASPECT, _MAX_ASPECT)
        h = int(np.clip(round(w * aspect), lo, hi))
        x0 = int(rng.integers(0, size - w + 1))
        y0 = int(rng.integers(0, size - h + 1))
        box = (x0, y0, x0 + w, y0 + h)
        if all(
            box[0] >= b[2] + _GAP or b[0] >= box[2] + _GAP or box[1] >= b[3] + _GAP or b[1] >= box[3] + _GAP
            for b in boxes
        ):
            return box
    return None


def _render(cfg: SynthConfig, split: str, index: int) -> tuple[Image.Image, list[str]]:
    """One image and its label lines; depends only on (cfg, split, index)."""
    size = cfg.imgsz
    rng = np.random.default_rng([cfg.seed, _SPLITS.index(split), index, cfg.classes, size])
    img, bg_mean = _background(rng, size)
    n = int(rng.integers(_MIN_OBJECTS, _MAX_OBJECTS + 1))
    boxes: list[tuple[int, int, int, int]] = []
    lines: list[str] = []
    for _ in range(n):
        box = _place(rng, size, boxes)
        if box is None:
            continue
        cls = int(rng.integers(0, cfg.classes))
        mask = _draw_mask(SHAPE_NAMES[cls], box, size, rng)
        m = np.asarray(mask, dtype=np.float32)[..., None] / 255.0
        colour = _random_colour(rng, bg_mean)
        img = img * (1 - m) + colour[None, None, :] * m
        # Label = tight box of the rendered (visible) pixels.
        ys, xs = np.nonzero(np.asarray(mask) > 0)
        if xs.size == 0:  # cannot happen for boxes >= 15 % of imgsz >= 32; be safe
            continue
        bx0, bx1, by0, by1 = int(xs.min()), int(xs.max()) + 1, int(ys.min()), int(ys.max()) + 1
        boxes.append(box)
        lines.append(
            f"{cls} {(bx0 + bx1) / 2 / size:.6f} {(by0 + by1) / 2 / size:.6f} "
            f"{(bx1 - bx0) / size:.6f} {(by1 - by0) / size:.6f}"
        )
    img = img + rng.normal(0.0, _NOISE_SIGMA, size=img.shape)
    arr = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return Image.fromarray(arr, "RGB"), lines


# --------------------------------------------------------------------------- files


def load_manifest(out_dir: Path) -> dict | None:
    """The manifest of a complete dataset at `out_dir`, or None."""
    try:
        return json.loads((Path(out_dir) / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None


def _looks_complete(out_dir: Path, cfg: SynthConfig) -> bool:
    """Cheap check that no file of a manifest-bearing dataset went missing."""
    if not (out_dir / "data.yaml").is_file():
        return False
    for split in _SPLITS:
        for kind in ("images", "labels"):
            try:
                if len(os.listdir(out_dir / kind / split)) != cfg.count(split):
                    return False
            except OSError:
                return False
    return True


def _data_yaml_text(out_dir: Path, cfg: SynthConfig) -> str:
    # Written by hand (no PyYAML needed) with JSON-quoted strings, which are valid YAML.
    lines = [
        "# Synthetic shapes detection dataset, generated by orchestrator.data.synth",
        f"# config: {json.dumps(cfg.manifest()['config'], sort_keys=True)}",
        f"path: {json.dumps(str(out_dir))}",
        "train: images/train",
        "val: images/val",
        f"nc: {cfg.classes}",
        "names:",
    ]
    lines += [f"  {i}: {name}" for i, name in enumerate(cfg.names)]
    return "\n".join(lines) + "\n"


def _write_all(tmp: Path, final: Path, cfg: SynthConfig) -> None:
    for split in _SPLITS:
        img_dir, lbl_dir = tmp / "images" / split, tmp / "labels" / split
        img_dir.mkdir(parents=True)
        lbl_dir.mkdir(parents=True)
        for i in range(cfg.count(split)):
            image, lines = _render(cfg, split, i)
            image.save(img_dir / f"{i:06d}.png", format="PNG", compress_level=6)
            (lbl_dir / f"{i:06d}.txt").write_text("".join(line + "\n" for line in lines))
    (tmp / "data.yaml").write_text(_data_yaml_text(final, cfg))
    # The manifest is written last: its presence marks a complete dataset.
    (tmp / MANIFEST_NAME).write_text(json.dumps(cfg.manifest(), indent=2, sort_keys=True) + "\n")


def generate_dataset(
    out_dir: Path | str,
    images: int = 128,
    val_images: int = 32,
    classes: int = 3,
    imgsz: int = 128,
    seed: int = 0,
) -> Path:
    """Generate (or reuse) the synthetic dataset at `out_dir`; return its data.yaml path.

    Raises ValueError for bad arguments (the message starts with the argument's name)
    and FileExistsError if `out_dir` exists, is not empty and is not a synth dataset.
    """
    cfg = SynthConfig(images=images, val_images=val_images, classes=classes, imgsz=imgsz, seed=seed)
    out_dir = Path(out_dir).expanduser().absolute()
    data_yaml = out_dir / "data.yaml"

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
    a = ap.parse_args(argv)
    try:
        path = generate_dataset(a.out_dir, a.images, a.val_images, a.classes, a.imgsz, a.seed)
    except (ValueError, FileExistsError) as e:
        ap.error(str(e))
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
