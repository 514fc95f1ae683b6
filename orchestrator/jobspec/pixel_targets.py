"""Per-pixel targets, read as Ultralytics reads them, checked before anything runs: a semantic dataset's masks
(`SemanticDataset`: one PNG per image under `masks_dir`, a class id per pixel, 255 ignored, `label_mapping`
applied first) and a depth dataset's maps (`DepthDataset`: one per image under depth/, a 16-bit PNG of
metres x `depth_scale` or a 2-D float NPY of metres, 0 marking a pixel without depth).

Ultralytics skips an image whose target is missing and drops one it cannot use ("ignoring corrupt
image/mask"), silently shrinking the dataset: the plan names each such file in one line. Headers are read for
every file (sizes, modes); the pixel values for at most MAX_DECODED files per split (a warning says when the
rest were not decoded). Pillow and numpy only."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

# Ultralytics' ignore label in a semantic mask, and its default depth_scale (PNG value per metre) and max_depth
IGNORE = 255
DEPTH_SCALE = 1000
MAX_DEPTH = 100.0
MIN_VALID_DEPTH = 0.001  # DepthLoss26: a pixel is supervised where its depth exceeds 1 mm
# Below this share of supervised pixels (over the checked maps of a split) the plan says what the rest are: sparse
# ground truth is normal (LiDAR: about 5 %), but a map that is mostly negative, NaN or beyond max_depth usually
# means a wrong depth_scale or sign, and the metrics then count only the few pixels left (delta1 1.0 from nothing)
VALID_SHARE_WARN = 0.2
ASPECT_TOLERANCE = 0.02  # verify_image_depth: |log(map aspect / image aspect)| at most this
MAX_DECODED = 2000  # targets whose pixels are read per split (the headers of all are)
MAX_PROBLEMS = 20
IMAGE_SUFFIXES_TRIED = ("png", "bmp", "jpg", "jpeg", "tif", "tiff", "webp")  # a mask with another suffix


@dataclass
class TargetScan:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- the data.yaml's own keys

def yaml_problems(task: str, cfg: dict, label: str) -> list[str]:
    """semantic: `masks_dir` a folder name, `label_mapping` raw ids to class ids (or ignore_label);
    depth: `depth_scale` and `max_depth` positive numbers."""
    if task == "semantic":
        problems = []
        masks = cfg.get("masks_dir")
        if masks is not None and (not isinstance(masks, str) or not masks.strip() or "/" in masks.strip("/")):
            problems.append(f"data: {label} 'masks_dir: {masks!r}' must be one folder name (beside images/)")
        return problems + _mapping_problems(cfg.get("label_mapping"), label)
    if task == "depth":
        return [f"data: {label} '{key}: {cfg[key]!r}' must be a positive number" for key in ("depth_scale", "max_depth")
                if key in cfg and not _positive_number(cfg[key])]
    return []


def _positive_number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _mapping_problems(mapping, label: str) -> list[str]:
    if mapping is None:
        return []
    if not isinstance(mapping, dict):
        return [f"data: {label} 'label_mapping' must map raw mask ids to class ids (got {type(mapping).__name__})"]
    for raw, to in mapping.items():
        try:
            int(raw)
            if not (to is None or (isinstance(to, str) and to.strip() == "ignore_label")):
                int(to)  # a class id (raises otherwise)
        except (TypeError, ValueError):
            return [f"data: {label} 'label_mapping' entry {raw!r}: {to!r} must map an integer id to a class id or "
                    "ignore_label"]
    return []


def label_lut(mapping: dict | None) -> list[int]:
    """SemanticDataset._build_label_luts' forward table: raw id (0..255) -> training id (255: ignore)."""
    lut = list(range(256))
    for raw, to in (mapping or {}).items():
        raw = int(raw)
        to = IGNORE if to is None or (isinstance(to, str) and to.strip() == "ignore_label") else int(to)
        if 0 <= raw < 256:
            lut[raw] = to
    return lut


# ----------------------------------------------------------------------------- the files

def mask_path(image: str, masks_dir: str) -> str:
    """img2label_paths(label_dir=masks_dir, suffix='.png'): the last /images/ becomes /MASKS_DIR/; when that
    file is missing, verify_image_mask tries the same stem with Ultralytics' other image suffixes."""
    sep_images, sep_masks = f"{os.sep}images{os.sep}", f"{os.sep}{masks_dir.strip(os.sep)}{os.sep}"
    stem = os.path.splitext(sep_masks.join(image.rsplit(sep_images, 1)) if sep_images in image else image)[0]
    first = stem + ".png"
    if os.path.isfile(first):
        return first
    return next((f"{stem}.{s}" for s in IMAGE_SUFFIXES_TRIED if os.path.isfile(f"{stem}.{s}")), first)


def depth_path(image: str) -> str:
    """DepthDataset._depth_path_for: the last images/ part becomes depth/; the .png, else the .npy."""
    parts = image.split(os.sep)
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == "images":
            parts[i] = "depth"
            break
    stem = os.path.splitext(os.sep.join(parts))[0]
    return stem + ".png" if os.path.isfile(stem + ".png") else stem + ".npy"


def scan(task: str, split: str, images: list[str], cfg: dict, nc: int | None) -> TargetScan:
    """Each image's target: present, readable, its size the image's, its values in range (module doc)."""
    found = TargetScan()
    problems: list[str] = []
    missing, decoded = 0, 0
    tally: dict[str, int] = {"pixels": 0, "valid": 0, "negative": 0, "nonfinite": 0}  # of the decoded depth maps
    for image in images:
        target = mask_path(image, str(cfg.get("masks_dir") or "masks")) if task == "semantic" else depth_path(image)
        if not os.path.isfile(target):
            missing += 1
            continue
        decode = decoded < MAX_DECODED
        decoded += decode
        try:
            why = (_mask_problem(image, target, cfg, nc, decode) if task == "semantic"
                   else _depth_problem(image, target, cfg, decode, tally))
        except Exception as exc:  # noqa: BLE001 - any unreadable file is one line, as Ultralytics drops it
            why = f"cannot be read ({type(exc).__name__}: {str(exc)[:120]})"
        if why:
            problems.append(f"data: {target}: {why}")
    what = "mask" if task == "semantic" else "depth map"
    if images and missing == len(images):
        example = mask_path(images[0], str(cfg.get("masks_dir") or "masks")) if task == "semantic" \
            else depth_path(images[0])
        found.problems.append(f"data: none of the {len(images)} {split} images has a {what} (expected e.g. "
                              f"{example}); Ultralytics would find no labels")
    elif missing:
        found.warnings.append(f"data: {missing} of {len(images)} {split} images have no {what}: Ultralytics skips them")
    if decoded < len(images) - missing:
        found.warnings.append(f"data: the pixel values of {decoded} of {len(images) - missing} {split} {what}s were "
                              "checked (their sizes all)")
    found.warnings += depth_share_warning(tally, split, cfg)
    found.problems += problems[:MAX_PROBLEMS]
    if len(problems) > MAX_PROBLEMS:
        found.problems.append(f"data: ... and {len(problems) - MAX_PROBLEMS} more {split} {what}s with problems")
    return found


def _image_hw(image: str) -> tuple[int, int]:
    """The image's (height, width) as Ultralytics' exif_size gives it: an EXIF rotation by 90 degrees swaps them."""
    from PIL import Image

    with Image.open(image) as im:
        w, h = im.size
        try:
            turned = im.getexif().get(274) in {5, 6, 7, 8}
        except Exception:  # noqa: BLE001 - no readable EXIF: as stored
            turned = False
    return (w, h) if turned else (h, w)


def _mask_problem(image: str, mask: str, cfg: dict, nc: int | None, decode: bool) -> str | None:
    from PIL import Image

    with Image.open(mask) as im:
        mode, (w, h) = im.mode, im.size
        if mode in ("RGB", "RGBA", "CMYK", "YCbCr", "LAB", "HSV"):
            return (f"a mask in mode {mode}; Ultralytics reads it as grey levels, not class ids: save one channel of class "
                    "ids (mode L or P)")
        ih, iw = _image_hw(image)
        if (h, w) != (ih, iw):
            return f"mask size {w}x{h} does not match its image's {iw}x{ih}"
        if not decode:
            return None
        import numpy as np

        if mode == "P":  # verify_image_mask: a grey palette holds grey levels, a coloured one class indices
            palette = np.array(im.getpalette()).reshape(-1, 3)
            values = np.asarray(im.convert("L") if (palette == palette[:, :1]).all() else im)
        elif mode == "1":
            values = np.asarray(im, dtype=np.uint8)
        else:
            values = np.asarray(im)
    ids = np.unique(values)
    if ids.size and int(ids.max()) > 255:
        return f"mask ids up to {int(ids.max())}: Ultralytics' lookup table holds ids 0..255"
    lut = label_lut(cfg.get("label_mapping"))
    limit = max((nc or 1) - 1, 1)  # nc 1 (binary) keeps {0, 1}
    bad = [int(i) for i in ids if lut[int(i)] != IGNORE and lut[int(i)] > limit]
    if bad:
        return (f"mask ids {bad[:8]} are neither class ids 0..{limit} nor {IGNORE} (ignored)"
                + (" after label_mapping" if cfg.get("label_mapping") else ""))
    return None


def depth_share_warning(tally: dict[str, int], split: str, cfg: dict) -> list[str]:
    """The share of the checked depth maps' pixels that supervise the training, when it is low, with what the
    others are (negative, NaN or inf, beyond max_depth or 0)."""
    if not tally["pixels"] or tally["valid"] >= VALID_SHARE_WARN * tally["pixels"]:
        return []
    share = {k: 100 * v / tally["pixels"] for k, v in tally.items()}
    top = float(cfg.get("max_depth") or MAX_DEPTH)
    return [f"data: only {share['valid']:.1f} % of the pixels of the checked {split} depth maps have a depth between "
            f"{MIN_VALID_DEPTH * 1000:g} mm and max_depth {top:g} m ({share['negative']:.1f} % negative, "
            f"{share['nonfinite']:.1f} % NaN or inf, the rest 0 or beyond max_depth): Ultralytics ignores the others "
            "in the loss and the metrics; sparse ground truth (LiDAR) is normal, mostly invalid maps usually mean a "
            "wrong depth_scale or sign"]


def _depth_problem(image: str, depth: str, cfg: dict, decode: bool, tally: dict[str, int]) -> str | None:
    import numpy as np

    scale = cfg.get("depth_scale", DEPTH_SCALE)
    if depth.endswith(".npy"):
        values = np.load(depth, mmap_mode="r", allow_pickle=False)
        if values.ndim != 2 or values.dtype.kind != "f":
            return f"a depth NPY must be a 2-D float array of metres (got {values.ndim}-D {values.dtype})"
        shape = values.shape
        metres = np.asarray(values, dtype=np.float32) if decode else None
    else:
        from PIL import Image

        with Image.open(depth) as im:
            if im.format != "PNG" or im.mode not in ("I", "I;16"):
                return (f"a depth PNG must be 16-bit grey (metres x depth_scale {scale}); got a {im.format} in mode "
                        f"{im.mode}")
            shape = (im.height, im.width)
            metres = np.asarray(im).astype(np.float32) / scale if decode else None
    h, w = _image_hw(image)
    if abs(math.log((shape[1] / shape[0]) / (w / h))) > ASPECT_TOLERANCE:
        return f"depth map {shape[1]}x{shape[0]} does not have its image's aspect ({w}x{h})"
    if metres is not None:
        top = float(cfg.get("max_depth") or MAX_DEPTH)
        valid = int(((metres > MIN_VALID_DEPTH) & (metres < top)).sum())  # (NaN compares False: not valid)
        tally["pixels"] += metres.size
        tally["valid"] += valid
        tally["negative"] += int((metres < 0).sum())
        tally["nonfinite"] += int((~np.isfinite(metres)).sum())
        if valid < 10:
            return (f"{valid} pixels with a depth between {MIN_VALID_DEPTH * 1000:g} mm and max_depth {top:g} m: it "
                    "teaches nothing (0 marks a pixel without depth)")
    return None
