"""A COCO dataset the plan checked (jobspec/coco.py) converted once into Ultralytics' layout, in the tool's cache
under a name from its files' content (`datasets/coco-<digest>/`):

    images/<split>/<file_name>   a link to the user's image (read through, never written through, never copied)
    labels/<split>/<stem>.txt    one line per kept annotation: class, box (cx cy w h); segment: the polygon;
                                 pose: the box and every keypoint (x y visibility), all normalised
    data.yaml                    path, train, val, the file's class names (pose: kpt_shape), the sources

Nothing is written into the user's dataset. The copy is made in a scratch folder beside it and renamed into
place: a reader sees it whole or not at all, and of two conversions at once one rename wins. The same files
give the same folder (a second run reuses it); a changed annotation file gives another."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from orchestrator.errors import EnvError, UserError
from orchestrator.rundir import dump_yaml
from orchestrator.jobspec.coco import CocoData, box_in_image, read_coco
from orchestrator.jobspec.rle import rle_polygon

CONVERTED = "coco-{}"


def converted_yaml(cache: Path, data: CocoData) -> Path:
    """Where the converted copy's data.yaml is (or will be): `cache` is the tool's datasets folder."""
    return cache / CONVERTED.format(data.digest[:16]) / "data.yaml"


def convert_recorded(record: dict[str, list[str]], task: str, expect: Path) -> Path:
    """convert() from the plan's record of the splits (`plan.data.coco`: split -> [annotation file, images])."""
    return convert({split: (Path(ann), Path(images)) for split, (ann, images) in record.items()}, task, expect)


def convert(splits: dict[str, tuple[Path, Path]], task: str, expect: Path) -> Path:
    """The converted copy's data.yaml at `expect` (the plan's), made when missing. Files that changed since
    the plan named their copy are refused: the run would train on other labels than it planned."""
    if expect.is_file():
        return expect
    data = read_coco(splits)
    if converted_yaml(expect.parents[1], data) != expect:
        raise UserError(f"data.coco: the annotation files changed since the run was planned ({expect.parent.name} "
                        "no longer matches them); plan and submit the job again")
    return publish(expect, lambda scratch: write_dataset(splits, data, task, scratch, expect.parent), "data.coco")


def write_dataset(splits: dict[str, tuple[Path, Path]], data: CocoData, task: str, folder: Path, root: Path | None,
                  place: Callable[[Path, Path], None] | None = None) -> None:
    """The YOLO dataset into `folder`: each image placed by `place(source, target)` (a link, or a copy for
    `data import`), its labels, and a data.yaml whose `path:` is `root` (None: none, so Ultralytics reads the
    yaml's own folder: a dataset that can be moved)."""
    for name, (annotations, images) in splits.items():
        _write_split(json.loads(Path(annotations).read_bytes()), images.resolve(), folder, name, data, task,
                     place or link_image)
    (folder / "data.yaml").write_text(_data_yaml(root, data, splits, task))


def publish(expect: Path, fill: Callable[[Path], None], field_name: str,
            hint: str = "free space there or set YOLO_ORCH_CACHE") -> Path:
    """The converted copy whose data.yaml is `expect`: `fill` writes it into a scratch folder beside its place,
    which is then renamed into place (a reader sees it whole or not at all; of two conversions at once one
    rename wins). A full disk or a cache that cannot be written: one line (EnvError), nothing half-made left."""
    dest = expect.parent
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            scratch.chmod(0o755)
            fill(scratch)
            try:
                scratch.rename(dest)
            except OSError:
                if not expect.is_file():  # not another conversion's copy: a real failure
                    raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except OSError as exc:
        raise EnvError(f"{field_name}: cannot write {dest} ({exc.strerror or exc}); {hint}") from None
    return expect


def _data_yaml(root: Path | None, data: CocoData, splits: dict[str, tuple[Path, Path]], task: str) -> str:
    doc = {**({"path": str(root)} if root else {}), "train": "images/train", "val": "images/val",
           "names": dict(enumerate(data.names))}
    if task == "pose":
        doc["kpt_shape"] = list(data.kpt_shape)
    sources = "".join(f"#   {name}: {Path(ann).resolve()} (images {Path(images).resolve()})\n"
                      for name, (ann, images) in splits.items())
    return (f"# converted by yolo-orch from COCO JSON ({data.digest[:16]}):\n{sources}"
            + dump_yaml(doc))


def _write_split(doc: dict, images: Path, root: Path, split: str, data: CocoData, task: str,
                 place: Callable[[Path, Path], None]) -> None:
    lines: dict[int, list[str]] = {}
    sizes = {image["id"]: image for image in doc["images"]}
    for ann in doc["annotations"]:
        line = _label(ann, sizes[ann["image_id"]], data.class_of[ann["category_id"]], task,
                      data.kpt_shape[0] if data.kpt_shape else 0)
        if line is not None:
            lines.setdefault(ann["image_id"], []).append(line)
    for iid, image in sizes.items():
        name = Path(image["file_name"])
        place(images / name, root / "images" / split / name)
        if iid in lines:  # an image without a label file is background, as Ultralytics reads it
            label = (root / "labels" / split / name).with_suffix(".txt")
            label.parent.mkdir(parents=True, exist_ok=True)
            label.write_text("\n".join(lines[iid]) + "\n")


def _label(ann: dict, image: dict, cls: int, task: str, keypoints: int) -> str | None:
    """One annotation's label line; None for what the plan counted as skipped (crowd, zero area)."""
    if ann.get("iscrowd"):
        return None
    w, h = float(image["width"]), float(image["height"])
    corners = box_in_image(ann, (w, h))
    if corners is None:  # counted with the zero-area boxes by the plan
        return None
    x0, y0, x1, y1 = corners
    box = [(x0 + x1) / 2 / w, (y0 + y1) / 2 / h, (x1 - x0) / w, (y1 - y0) / h]
    if task == "segment":
        return _join(cls, _polygon(ann, (x0, y0, x1, y1), w, h))
    if task == "pose":
        points = ann.get("keypoints") or [0] * (3 * keypoints)  # none annotated: every one unlabelled
        kpts = [v for i in range(0, len(points), 3)
                for v in (points[i] / w, points[i + 1] / h, points[i + 2])]
        return _join(cls, box + kpts)
    return _join(cls, box)


def _polygon(ann: dict, box: tuple[float, float, float, float], w: float, h: float) -> list[float]:
    """The annotation's largest polygon (an RLE mask's largest outer contour: jobspec/rle.py), normalised and
    clipped; its box's corners when it has none (every label of a segment dataset needs a polygon: Ultralytics
    drops the masks of a split that mixes)."""
    seg = ann.get("segmentation")
    if isinstance(seg, dict):
        traced = rle_polygon(seg)
        seg = [traced] if traced else []
    polygons = [p for p in seg or [] if isinstance(p, list) and len(p) >= 6]
    if not polygons:
        x0, y0, x1, y1 = box
        polygons = [[x0, y0, x1, y0, x1, y1, x0, y1]]
    points = max(polygons, key=len)
    return [min(max(v / (w if i % 2 == 0 else h), 0.0), 1.0) for i, v in enumerate(points)]


def link_image(source: Path, link: Path) -> None:
    """The converted copy's image: a link to the user's file (read through, never written through, never copied)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(source, link)


def copy_image(source: Path, target: Path) -> None:
    """An imported dataset's image: a copy of the user's file (`data import`: a dataset that stands alone)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def _join(cls: int, values: list[float]) -> str:
    return " ".join([str(cls), *(f"{v:.6g}" for v in values)])
