"""Ultralytics NDJSON (the Ultralytics Platform's export) read and checked without a pixel: what a job's
`data: {ndjson: dataset.ndjson}` holds, at plan time (job_data.describe_ndjson); ndjson_convert.py converts it.

The format, as Ultralytics 8.4 reads it (ultralytics.data.converter.convert_ndjson_to_yolo): the first line
is the dataset record ({"type": "dataset", "task": ..., "class_names": {"0": "person"}, "path": ...,
"kpt_shape": ...}), every other line one image ({"type": "image", "file": ..., "split": train|val|test,
"url": ..., "annotations": {"boxes" | "segments" | "pose" | "obb": [[class, values...], ...]}}), each annotation
already a YOLO label line (normalised), which the converter writes as it is: an oriented box is therefore
the YOLO OBB line, its four corners (class, x1, y1, ..., x4, y4), and any other length is refused rather
than guessed at. Images are local when the dataset record names a `path`: the file
is `<path>/images/<split>/<file>`, relative to the NDJSON file; an image known only by its `url` would be
downloaded, which a job never does (offline by design): such a file is refused, one line.

Blocking, one line each naming the file and the line: a line that is not a JSON object, no dataset record
first, a task this reader does not convert (classify and depth, whose images Ultralytics reads only
from URLs), a split other than train/val/test, a file
name with a folder in it or named twice in a split, a missing local image, an annotation whose class is not
an integer in the class names, an annotation with values outside 0..1 or of the wrong length for the task,
no training image, annotations under another task's key. Counted as warnings: images without annotations
(background); no `val` split (a tenth of the training images become validation images, chosen as
Ultralytics chooses them: a shuffle seeded 0)."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.errors import UserError
from orchestrator.jobspec.coco import MAX_ANNOTATION_FILE, capped
from orchestrator.jobspec.files import read_regular_bounded

SPLITS = ("train", "val", "test")
SUFFIXES = (".ndjson", ".jsonl")  # how a file says it is NDJSON (`yolo train data=`, `data import`)
KEYS = {"detect": "boxes", "segment": "segments", "pose": "pose", "obb": "obb"}  # the list each task reads
TASKS = tuple(KEYS)


@dataclass(frozen=True)
class Image:
    split: str
    file: str  # a plain file name
    source: Path | str  # the local image, or its URL (`data import --download` only)
    labels: tuple[tuple[float, ...], ...]  # each one label line: class, then the normalised values


@dataclass
class NdjsonData:
    file: Path
    task: str
    names: tuple[str, ...]
    kpt_shape: tuple[int, int] | None
    images: list[Image] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    digest: str = ""  # of the file's bytes and its images folder: names the converted copy

    @property
    def train_images(self) -> int:
        return sum(image.split == "train" for image in self.images)

    def split(self, name: str) -> list[Image]:
        return [image for image in self.images if image.split == name]


def read_ndjson(path: Path, where: str = "data.ndjson", download: bool = False) -> NdjsonData:
    """The file read and checked; UserError with one line per problem (capped), nothing written. `download`
    (asked for: `data import --download`): an image only at an http(s) URL is taken, its URL its source."""
    path = Path(path)
    raw, why = read_regular_bounded(str(path), MAX_ANNOTATION_FILE)
    if raw is None:
        raise UserError(f"{where}: {path}: cannot be read ({why})")
    if len(raw) > MAX_ANNOTATION_FILE:
        raise UserError(f"{where}: {path} is larger than {MAX_ANNOTATION_FILE >> 30} GiB")
    problems: list[str] = []
    records = _records(raw, path, where, problems)
    if problems or not records:
        raise UserError(capped(problems or [f"{where}: {path} is empty"]))
    head = records[0][1]
    data = _dataset(head, path, where, problems)
    if data is None:
        raise UserError(capped(problems))
    root = _images_root(head, path, where, problems)
    seen: set[tuple[str, str]] = set()
    for number, record in records[1:]:
        image = _image(record, number, data, root, seen, f"{where}: {path}:{number}", problems, download)
        if image is not None:
            data.images.append(image)
    if not problems and not data.train_images:
        problems.append(f"{where}: {path} has no image in the `train` split")
    if problems:
        raise UserError(capped(problems))
    _background(data, where)
    _validation_split(data, where)
    data.digest = hashlib.sha256(raw + str(root).encode()).hexdigest()
    return data


def dataset_task(path: Path) -> str | None:
    """The task the file's dataset record names (its first line only), or None when it names none it can be."""
    raw, _ = read_regular_bounded(str(path), 1 << 20)
    try:
        head = json.loads((raw or b"").split(b"\n", 1)[0])
    except ValueError:
        return None
    task = head.get("task", "detect") if isinstance(head, dict) else None
    return task if task in TASKS else None


def _records(raw: bytes, path: Path, where: str, problems: list[str]) -> list[tuple[int, dict]]:
    out = []
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:  # not JSON, or bytes that are not UTF-8
            problems.append(f"{where}: {path}:{number}: not a JSON object ({exc})")
            continue
        if not isinstance(record, dict):
            problems.append(f"{where}: {path}:{number}: not a JSON object")
            continue
        out.append((number, record))
    return out


def _dataset(head: dict, path: Path, where: str, problems: list[str]) -> NdjsonData | None:
    """The first line: the task, the class names (contiguous ids, as Ultralytics fills the gaps), kpt_shape."""
    if head.get("type", "dataset") != "dataset":
        problems.append(f"{where}: {path}:1: the first line must be the dataset record (`\"type\": \"dataset\"`)")
        return None
    task = head.get("task", "detect")
    if task not in TASKS:
        problems.append(f"{where}: {path}: task {task!r} is not converted by yolo-orch (it converts "
                        f"{', '.join(TASKS)}); export the dataset as a YOLO folder and name its data.yaml")
        return None
    raw_names = head.get("class_names") or {}
    names: dict[int, str] = {}
    for key, name in raw_names.items() if isinstance(raw_names, dict) else []:
        if not str(key).isdigit() or not isinstance(name, str) or not name.strip():
            problems.append(f"{where}: {path}:1: class_names {key!r}: {name!r} is not a class id and its name")
            continue
        names[int(key)] = name
    if not names and not problems:
        problems.append(f"{where}: {path}:1: no class_names (`\"class_names\": {{\"0\": \"person\"}}`)")
    if problems:
        return None
    kpt = head.get("kpt_shape")
    kpt_shape = None
    if task == "pose":
        if not (isinstance(kpt, list) and len(kpt) == 2 and all(isinstance(v, int) for v in kpt) and kpt[0] > 0
                and kpt[1] in (2, 3)):
            problems.append(f"{where}: {path}:1: a pose dataset needs `kpt_shape: [keypoints, 2 or 3]` (got {kpt!r})")
            return None
        kpt_shape = (kpt[0], kpt[1])
    full = tuple(names.get(i, f"class{i}") for i in range(max(names) + 1))
    return NdjsonData(path, task, full, kpt_shape)


def _images_root(head: dict, path: Path, where: str, problems: list[str]) -> Path | None:
    local = head.get("path")
    if local is None:
        return None
    if not isinstance(local, str) or not local.strip():
        problems.append(f"{where}: {path}:1: path {local!r} is not a folder")
        return None
    return (path.parent / local).resolve()


def _image(record: dict, number: int, data: NdjsonData, root: Path | None, seen: set, where: str,
           problems: list[str], download: bool = False) -> Image | None:
    split, name = record.get("split"), record.get("file")
    if split not in SPLITS:
        problems.append(f"{where}: split {split!r} is not one of {', '.join(SPLITS)}")
        return None
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        problems.append(f"{where}: file {name!r} is not a plain file name")
        return None
    if (split, name) in seen:
        problems.append(f"{where}: {name} is named twice in the {split} split")
        return None
    seen.add((split, name))
    url = record.get("url")
    if root is None and download and isinstance(url, str) and url.lower().startswith(("https://", "http://")):
        labels = _labels(record.get("annotations"), data, where, problems)
        return None if labels is None else Image(split, name, url, labels)
    if root is None:
        where_from = _host(url)
        problems.append(f"{where}: image {name} is only at a URL ({where_from}) and is never downloaded (offline "
                        "by design): put the images beside the file and name their folder in the dataset "
                        "record's `path` (<path>/images/<split>/<file>), or fetch them once with `yolo-orch data "
                        "import FILE --download --out DIR`")
        return None
    source = root / "images" / split / name
    if not source.is_file():
        problems.append(f"{where}: image {source} does not exist")
        return None
    labels = _labels(record.get("annotations"), data, where, problems)
    return None if labels is None else Image(split, name, source, labels)


def _labels(annotations, data: NdjsonData, where: str, problems: list[str]) -> tuple | None:
    if annotations is None:
        return ()
    key = KEYS[data.task]
    if not isinstance(annotations, dict) or not isinstance(annotations.get(key, []), list):
        problems.append(f"{where}: annotations must be {{\"{key}\": [[class, ...], ...]}} for a {data.task} dataset")
        return None
    others = sorted(k for k, v in annotations.items() if k != key and v)
    if others and not annotations.get(key):  # Ultralytics would write them as this task's labels
        problems.append(f"{where}: annotations hold {', '.join(others)}; a {data.task} dataset reads {key}")
        return None
    out = []
    for item in annotations.get(key, []):
        problem = _label_problem(item, data)
        if problem:
            problems.append(f"{where}: {key} {_short(item)}: {problem}")
            return None
        out.append(tuple(item))
    return tuple(out)


def _label_problem(item, data: NdjsonData) -> str | None:
    if not isinstance(item, list) or not item or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                         for v in item):
        return "not a list of numbers"
    cls = item[0]
    if cls != int(cls) or not 0 <= cls < len(data.names):
        return f"class {cls} is not one of the class_names' ids (0..{len(data.names) - 1})"
    values = item[1:]
    if data.task == "detect" and len(values) != 4:
        return f"a box is [class, x_center, y_center, width, height] ({len(values)} values after the class)"
    if data.task == "segment" and (len(values) < 6 or len(values) % 2):
        return "a polygon is [class, x1, y1, x2, y2, x3, y3, ...]: at least three points"
    if data.task == "obb" and len(values) != 8:
        return (f"an oriented box is the YOLO OBB label [class, x1, y1, x2, y2, x3, y3, x4, y4] ({len(values)} values "
                "after the class)")
    if data.task == "pose":
        count, dims = data.kpt_shape
        if len(values) != 4 + count * dims:
            return f"a pose label is [class, box (4), {count} keypoints x {dims}] ({len(values)} values after the class)"
    coordinates = values if data.task != "pose" else values[:4] + [v for i, v in enumerate(values[4:])
                                                                   if data.kpt_shape[1] == 2 or i % 3 != 2]
    if any(not 0.0 <= v <= 1.0 for v in coordinates):
        return "a coordinate outside 0..1 (the values are normalised to the image)"
    return None


def _background(data: NdjsonData, where: str) -> None:
    empty = sum(not image.labels for image in data.images)
    if empty:
        data.warnings.append(f"{where}: {empty} image(s) without annotations: background images, as Ultralytics reads "
                             "them")


def _validation_split(data: NdjsonData, where: str) -> None:
    """No `val` split: a tenth of the training images validate (at least one), drawn as Ultralytics draws them
    (its converter: random.Random(0).shuffle of the training records in file order)."""
    if data.split("val"):
        return
    train = data.split("train")
    if len(train) < 2:
        raise UserError(f"{where}: {data.file} has no `val` split and {len(train)} training image(s); give a `val` "
                        "split, or at least two training images to split")
    random.Random(0).shuffle(train)
    chosen = {id(image) for image in train[:max(1, len(train) // 10)]}
    data.images = [Image("val", i.file, i.source, i.labels) if id(i) in chosen else i for i in data.images]
    data.warnings.append(f"{where}: no `val` split: {len(chosen)} of the {len(train)} training images validate "
                         "(chosen as Ultralytics chooses them)")


def _host(url) -> str:
    from urllib.parse import urlsplit

    if not isinstance(url, str) or not url:
        return "no `url` either"
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}/..." if parts.scheme else "a URL"


def _short(item) -> str:
    text = json.dumps(item)
    return text if len(text) <= 60 else text[:57] + "..."
