"""COCO JSON as annotation tools export it (CVAT, Label Studio, Roboflow), read and checked without a pixel:
what a job's `data: {coco: ...}` holds, at plan time (job_data.describe_coco); coco_convert.py converts it.

    read_split(annotations, images, field)   one split's file: its images, classes and problems
    read_coco({"train": (json, images), "val": ...}, field)
                                             the splits together: one class list, the task the annotations
                                             hold, the training image count, warnings; UserError otherwise

Classes: each category id maps to a contiguous class in the file's own order of `categories`, its name kept.
COCO's own files list their 80 categories in id order, so this is Ultralytics' 91-to-80 table where the
categories are COCO's, and never applied to a custom dataset's ids (ultralytics.data.converter.convert_coco
applies it by default: the trap of ultralytics#17898).

Blocking, one line each naming the file and the id (the plan refuses with exit 2): a file that is not COCO
JSON, duplicate image, annotation or category ids, two images of one file name, a category without a name, an
annotation naming an image or a category the file does not list, an image missing on disk, keypoints whose
count differs from their category's, splits whose categories differ. Counted as warnings: crowd annotations (skipped, as Ultralytics
skips them), images without annotations (background), boxes of zero area (dropped) and boxes reaching outside
their image (clipped)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import UserError
from orchestrator.jobspec.files import read_regular_bounded
from orchestrator.jobspec.rle import rle_problem

MAX_ANNOTATION_FILE = 2 << 30  # 2 GiB: COCO 2017's train file is 448 MiB
MAX_LINES = 20  # problems named one per line; the rest counted


@dataclass(frozen=True)
class Category:
    id: int
    name: str
    keypoints: int  # how many keypoints its annotations carry (0: none)


@dataclass
class Split:
    """One annotation file, read: what the plan and the conversion need of it."""

    file: Path
    images: int = 0
    background: int = 0  # images without a usable annotation
    crowd: int = 0
    zero_area: int = 0
    clipped: int = 0
    categories: tuple[Category, ...] = ()
    shapes: set[str] = field(default_factory=set)  # what its annotations hold: box, polygon, rle, keypoints
    problems: list[str] = field(default_factory=list)
    digest: str = ""  # sha256 of the file's bytes: a changed file is another converted copy


@dataclass(frozen=True)
class CocoData:
    task: str  # detect, segment or pose: what the annotations hold
    names: tuple[str, ...]  # class i's name
    class_of: dict[int, int]  # category id -> class
    kpt_shape: tuple[int, int] | None  # pose: (keypoints, 3)
    train_images: int
    warnings: tuple[str, ...]
    digest: str  # of every split's file and images folder: names the converted copy
    shapes: frozenset[str] = frozenset()


def coco_splits(job) -> dict[str, tuple[Path, Path]]:
    """A job's COCO splits (`job`: a loader.LoadedJob): (annotation file, images folder), absolute."""
    source = job.spec.data.coco
    images = source.images
    folders = {"train": images, "val": images} if isinstance(images, str) else {"train": images.train, "val": images.val}
    return {split: (job.resolve_path(getattr(source, split)).resolve(), job.resolve_path(folders[split]).resolve())
            for split in ("train", "val")}


def read_coco(splits: dict[str, tuple[Path, Path]], field_name: str = "data.coco") -> CocoData:
    """Every split's file read and checked; the classes, task and training images of the whole."""
    read = {name: read_split(ann, images, f"{field_name}.{name}") for name, (ann, images) in splits.items()}
    problems = [p for split in read.values() for p in split.problems]
    first_name, first = next(iter(read.items()))
    for name, split in read.items():
        if split.categories != first.categories and not split.problems and not first.problems:
            problems.append(f"{field_name}.{name}: {split.file} lists other categories than {first.file} "
                            f"({first_name}); every split must list the same, in the same order")
    if problems:
        raise UserError(capped(problems))
    categories = first.categories
    shapes = set().union(*(s.shapes for s in read.values()))
    task = "pose" if "keypoints" in shapes else "segment" if shapes & {"polygon", "rle"} else "detect"
    keypoints = max((c.keypoints for c in categories), default=0)
    digest = hashlib.sha256(json.dumps([[name, split.digest, str(splits[name][1].resolve())]
                                        for name, split in sorted(read.items())]).encode()).hexdigest()
    return CocoData(task, tuple(c.name for c in categories), {c.id: i for i, c in enumerate(categories)},
                    (keypoints, 3) if task == "pose" else None, read["train"].images if "train" in read else 0,
                    tuple(w for name, split in read.items() for w in _warnings(f"{field_name}.{name}", split)),
                    digest, frozenset(shapes))


def read_split(annotations: Path, images: Path, where: str) -> Split:
    """One file: its structure, ids, classes and annotations checked; problems listed, not raised."""
    split = Split(annotations)
    doc, split.digest = _load(annotations, where, split.problems)
    if doc is None:
        return split
    split.categories = _categories(doc, annotations, where, split.problems)
    sizes, refused = _images(doc, annotations, images, where, split)
    _annotations(doc, sizes, refused, split, where)
    return split


def _load(path: Path, where: str, problems: list[str]) -> tuple[dict | None, str]:
    """The file's document and the sha256 of its bytes; (None, ...) with the problem listed."""
    data, why = read_regular_bounded(str(path), MAX_ANNOTATION_FILE)
    if data is None:
        problems.append(f"{where}: {path}: cannot be read ({why})")
        return None, ""
    if len(data) > MAX_ANNOTATION_FILE:
        problems.append(f"{where}: {path} is larger than {MAX_ANNOTATION_FILE >> 30} GiB")
        return None, ""
    digest = hashlib.sha256(data).hexdigest()
    try:
        doc = json.loads(data)
    except ValueError as exc:  # JSONDecodeError (line, column), or bytes that are not UTF-8
        problems.append(f"{where}: {path} is not JSON ({exc})")
        return None, digest
    missing = [key for key in ("images", "annotations", "categories")
               if not isinstance(doc, dict) or not isinstance(doc.get(key), list)]
    if missing:
        problems.append(f"{where}: {path} is not a COCO annotation file (no {', '.join(missing)} list)")
        return None, digest
    return doc, digest


def _categories(doc: dict, path: Path, where: str, problems: list[str]) -> tuple[Category, ...]:
    out, seen = [], set()
    for cat in doc["categories"]:
        cid = _int_id(cat)
        if cid is None:
            problems.append(f"{where}: {path}: a category without an integer id ({_short(cat)})")
            continue
        if cid in seen:
            problems.append(f"{where}: {path}: category id {cid} is listed twice")
            continue
        seen.add(cid)
        name = cat.get("name")
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{where}: {path}: category {cid} has no name")
            continue
        keypoints = cat.get("keypoints")
        out.append(Category(cid, name.strip(), len(keypoints) if isinstance(keypoints, list) else 0))
    if not doc["categories"]:
        problems.append(f"{where}: {path}: no categories")
    return tuple(out)


def _images(doc: dict, path: Path, folder: Path, where: str,
            split: Split) -> tuple[dict[int, tuple[float, float]], set[int]]:
    """Image id -> (width, height) of the images listed and found on disk; the ids of those refused (their
    own line names them: their annotations are not named again)."""
    sizes: dict[int, tuple[float, float]] = {}
    refused: set[int] = set()
    named: dict[str, int] = {}  # file_name -> the first image id that names it
    for image in doc["images"]:
        iid, name = _int_id(image), image.get("file_name") if isinstance(image, dict) else None
        if iid is None or not isinstance(name, str) or not name:
            split.problems.append(f"{where}: {path}: an image without an integer id or a file_name ({_short(image)})")
            continue
        if iid in sizes:
            split.problems.append(f"{where}: {path}: image id {iid} is listed twice")
            continue
        if named.setdefault(name, iid) != iid:
            split.problems.append(f"{where}: {path}: image {iid}'s file_name {name} is image {named[name]}'s too")
            refused.add(iid)
            continue
        width, height = image.get("width"), image.get("height")
        if not all(isinstance(v, (int, float)) and v > 0 for v in (width, height)):
            split.problems.append(f"{where}: {path}: image {iid} ({name}) has no positive width and height")
            refused.add(iid)
            continue
        if Path(name).is_absolute() or ".." in Path(name).parts or not (folder / name).is_file():
            split.problems.append(f"{where}: {path}: image {iid}: {folder / name} is not there")
            refused.add(iid)
            continue
        sizes[iid] = (float(width), float(height))
    split.images = len(sizes)
    return sizes, refused


def _annotations(doc: dict, sizes: dict[int, tuple[float, float]], refused: set[int], split: Split,
                 where: str) -> None:
    keypoints = {c.id: c.keypoints for c in split.categories}
    annotated, seen = set(), set()
    for ann in doc["annotations"]:
        aid = _int_id(ann)
        if aid is None or aid in seen:
            split.problems.append(f"{where}: {split.file}: " + (f"annotation id {aid} is listed twice" if aid is not None
                                                                  else f"an annotation without an integer id ({_short(ann)})"))
            continue
        seen.add(aid)
        iid, cid = ann.get("image_id"), ann.get("category_id")
        if iid in refused:
            continue
        if iid not in sizes:
            split.problems.append(f"{where}: {split.file}: annotation {aid} names image {iid}, which the file does not "
                                  "list")
            continue
        if cid not in keypoints:
            split.problems.append(f"{where}: {split.file}: annotation {aid} names category {cid}, which the file does "
                                  "not list")
            continue
        if ann.get("iscrowd"):
            split.crowd += 1
            continue
        if _box_kept(ann, sizes[iid], split) and _shapes_fit(ann, aid, keypoints[cid], sizes[iid], split, where):
            annotated.add(iid)
    split.background = len(sizes) - len(annotated)


def box_in_image(ann: dict, size: tuple[float, float]) -> tuple[float, float, float, float] | None:
    """The annotation's box clipped to its image, as corners (x0, y0, x1, y1); None when it has no box of
    positive area inside the image. The one rule for the plan's counts and the converted labels."""
    box = ann.get("bbox")
    if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
        return None
    x, y, w, h = (float(v) for v in box)
    corners = (max(x, 0.0), max(y, 0.0), min(x + w, size[0]), min(y + h, size[1]))
    if w <= 0 or h <= 0 or corners[2] <= corners[0] or corners[3] <= corners[1]:
        return None
    return corners


def _box_kept(ann: dict, size: tuple[float, float], split: Split) -> bool:
    """A box of positive area, clipped to its image (counted) as Ultralytics' converter clips it."""
    corners = box_in_image(ann, size)
    if corners is None:
        split.zero_area += 1
        return False
    x, y, w, h = (float(v) for v in ann["bbox"])
    split.clipped += corners != (x, y, x + w, y + h)
    split.shapes.add("box")
    return True


def _shapes_fit(ann: dict, aid: int, keypoints: int, size: tuple[float, float], split: Split, where: str) -> bool:
    seg = ann.get("segmentation")
    if isinstance(seg, dict) and "counts" in seg:
        why = rle_problem(seg, *size)
        if why:
            split.problems.append(f"{where}: {split.file}: annotation {aid}: its RLE mask cannot be read ({why})")
            return False
        split.shapes.add("rle")
    elif isinstance(seg, list) and seg:
        split.shapes.add("polygon")
    points = ann.get("keypoints")
    if isinstance(points, list) and points:
        if len(points) != 3 * keypoints:
            split.problems.append(f"{where}: {split.file}: annotation {aid} has {len(points) // 3} keypoints, its "
                                  f"category {keypoints}")
            return False
        split.shapes.add("keypoints")
    return True


def _warnings(where: str, split: Split) -> list[str]:
    counted = ((split.crowd, "crowd annotations skipped (as Ultralytics skips them)"),
               (split.background, "images without annotations (background)"),
               (split.zero_area, "boxes of zero area dropped"),
               (split.clipped, "boxes reaching outside their image clipped"))
    return [f"{where}: {split.file.name}: {n} {what}" for n, what in counted if n]


def _int_id(record: Any) -> int | None:
    value = record.get("id") if isinstance(record, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def capped(problems: list[str]) -> list[str]:
    """At most MAX_LINES problems, one line each, and how many more (a file of 100,000 broken annotations)."""
    if len(problems) <= MAX_LINES:
        return problems
    return problems[:MAX_LINES] + [f"... and {len(problems) - MAX_LINES} more problems of the same files"]
