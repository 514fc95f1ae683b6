"""A dataset, read as Ultralytics will read it for the job's task, and its labels checked before anything
runs (no torch: these are text files and folder walks). Detect, segment, pose and obb datasets are a
data.yaml with label files (each task its own line format); semantic and depth datasets a data.yaml with a
mask or depth map per image (jobspec/pixel_targets.py; semantic without `masks_dir`: polygon label files); a
classify dataset is a folder of train/ and val/ (or test/) folders, one folder per class.

Ultralytics (`ultralytics.data.utils.check_det_dataset`) resolves a relative `path:` against the
training process's current folder, else its settings' `datasets_dir`; a hand-written data.yaml often
means the yaml's own folder. The plan resolves it the same way, falls back to the yaml's folder,
and the run hands Ultralytics a copy with the absolute root (`runner.write_data_yaml`), so the plan and
the trainer read the same images wherever the worker starts."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.jobspec import pixel_targets
from orchestrator.jobspec.files import read_regular_bounded

# Ultralytics' IMG_FORMATS (ultralytics/data/utils.py): the files its dataset counts as images.
IMAGE_SUFFIXES = {f".{s}" for s in ("avif", "bmp", "dng", "heic", "heif", "jp2", "jpeg", "jpg", "mpo", "png", "tif",
                                    "tiff", "webp")}
MAX_IMAGES_COUNTED = 2_000_000  # beyond this the count is "unknown" (None), as before
MAX_OTHER_ENTRIES = 100_000  # non-image files/folders met in an image folder before it is called wrong
MAX_LABEL_FILES_CHECKED = 200_000  # the label check reads at most this many files per split
MAX_LABEL_PROBLEMS = 20
MAX_LABEL_BYTES = 16 << 20  # one image's label file: real ones are a few KiB (a polygon per object)
MAX_LIST_BYTES = 256 << 20  # a `train: list.txt` of image paths: ~100 bytes a line, millions of lines


def ultralytics_datasets_dir() -> Path:
    """The user's Ultralytics `datasets_dir`: their settings.json, else Ultralytics' default (the
    folder above the git checkout the command runs in, else the current folder, plus /datasets)."""
    config = os.environ.get("YOLO_CONFIG_DIR")
    settings = (Path(config) if config else Path.home() / ".config") / "Ultralytics" / "settings.json"
    try:
        value = json.loads(settings.read_text()).get("datasets_dir")
        if value:
            return Path(value)
    except (OSError, ValueError, AttributeError):
        pass
    cwd = Path.cwd()
    git_root = next((p for p in (cwd, *cwd.parents) if (p / ".git").exists()), None)
    return (git_root.parent if git_root else cwd).resolve() / "datasets"


def root_candidates(cfg: dict, yaml_path: Path) -> list[Path]:
    """Where the dataset root may be, in Ultralytics' order, then the yaml's folder."""
    raw = cfg.get("path")
    if not raw:
        return [yaml_path.parent.resolve()]
    path = Path(str(raw)).expanduser()
    if path.is_absolute():
        return [path]
    return [path.resolve(), (ultralytics_datasets_dir() / path).resolve(), (yaml_path.parent / path).resolve()]


def dataset_root(cfg: dict, yaml_path: Path) -> Path:
    """The first candidate that exists; else the one Ultralytics would use (its error then names it)."""
    candidates = root_candidates(cfg, yaml_path)
    return next((c for c in candidates if c.is_dir()), candidates[min(1, len(candidates) - 1)])


def relative_root(cfg: dict) -> bool:
    """True when `path:` is relative: the run then gets a data.yaml with the absolute root."""
    raw = cfg.get("path")
    return bool(raw) and not Path(str(raw)).expanduser().is_absolute()


def split_entries(cfg: dict, key: str, root: Path) -> list[Path]:
    entries = cfg.get(key) or []
    entries = entries if isinstance(entries, list) else [entries]
    out = []
    for entry in entries:
        folder = Path(str(entry)).expanduser()
        out.append(folder if folder.is_absolute() else (root / folder).resolve())
    return out


def check_yaml(cfg: dict, yaml_path: Path, label: str, task: str = "detect") -> list[str]:
    """The checks Ultralytics' check_det_dataset makes, one line each: keys, nc against names, folders
    (pose: kpt_shape)."""
    problems = [f"data: {label} has no '{key}' key" for key in ("train", "val") if key not in cfg]
    if task == "pose":
        problems += _check_kpt_shape(cfg, label)
    problems += pixel_targets.yaml_problems(task, cfg, label)
    names, nc = cfg.get("names"), cfg.get("nc")
    if names is None and nc is None:
        problems.append(f"data: {label} has no 'names' key (nor 'nc')")
    elif names is not None and not isinstance(names, (list, dict)):
        problems.append(f"data: {label} 'names' must be a list or a mapping of class ids to names")
    elif isinstance(names, dict):
        problems += _check_name_ids(names, label)
    if nc is not None and (isinstance(nc, bool) or not isinstance(nc, (int, float)) or nc != int(nc) or nc < 1):
        problems.append(f"data: {label} 'nc: {nc}' must be a positive integer")
    elif nc is not None and isinstance(names, (list, dict)) and len(names) != nc:
        problems.append(f"data: {label} has 'nc: {nc}' but {len(names)} names; they must match (drop nc or fix it)")
    if problems:
        return problems
    root = dataset_root(cfg, yaml_path)
    if relative_root(cfg) and not root.is_dir():
        tried = ", ".join(str(c) for c in root_candidates(cfg, yaml_path))
        return [f"data: {label} path '{cfg['path']}' is not a folder in any place Ultralytics or the yaml's folder "
                f"would put it (tried {tried}); give an absolute path"]
    if root == Path(root.anchor):
        return [f"data: {label} has the filesystem root as its dataset folder (path: {cfg.get('path')}); "
                "point `path:` at the dataset"]
    for key in ("train", "val"):
        for folder in split_entries(cfg, key, root):
            if not folder.exists():
                problems.append(f"data: {key} folder {folder} does not exist (from {label})")
    return problems


def _check_name_ids(names: dict, label: str) -> list[str]:
    """Ultralytics' check_class_names: the keys of a `names` mapping are the class ids 0..n-1 (as
    integers or their text); others end the run with a KeyError."""
    try:
        ids = sorted(int(k) for k in names)
    except (TypeError, ValueError):
        return [f"data: {label} 'names' keys must be class ids 0..{len(names) - 1} (got {sorted(map(str, names))[:5]})"]
    if not ids:
        return [f"data: {label} 'names' is empty; at least one class name is needed"]
    if ids != list(range(len(ids))):
        return [f"data: {label} 'names' has {len(ids)} classes, so its keys must be 0..{len(ids) - 1} (got "
                f"{', '.join(map(str, ids[:8]))}{', ...' if len(ids) > 8 else ''})"]
    return []


def _check_kpt_shape(cfg: dict, label: str) -> list[str]:
    shape, flip = cfg.get("kpt_shape"), cfg.get("flip_idx")
    if not (isinstance(shape, list) and len(shape) == 2 and all(type(v) is int for v in shape)
            and shape[0] >= 1 and shape[1] in (2, 3)):
        return [f"data: {label} needs 'kpt_shape: [keypoints, 2 or 3]' for a pose dataset (got {shape!r})"]
    if flip is not None and not (isinstance(flip, list) and sorted(flip) == list(range(shape[0]))):
        return [f"data: {label} 'flip_idx' must list each of the {shape[0]} keypoints once (got {flip!r})"]
    return []


def label_values(task: str, cfg: dict) -> int | None:
    """How many numbers a label line of `task` holds (None: a polygon, any odd count from 7)."""
    if task == "pose":
        kpts, dims = cfg["kpt_shape"]
        return 5 + kpts * dims
    return {"obb": 9, "segment": None, "semantic": None}.get(task, 5)


def per_pixel(task: str, cfg: dict) -> bool:
    """Whether the dataset's targets are images (semantic masks under masks_dir, depth maps), not label lines:
    a semantic data.yaml without masks_dir is polygon labels (Ultralytics' PolygonSemanticDataset)."""
    return task == "depth" or (task == "semantic" and bool(cfg.get("masks_dir")))


def trained_classes(task: str, cfg: dict, nc: int | None) -> int | None:
    """The classes the model is built with: a semantic dataset of polygons with several classes gets a background
    class more (Ultralytics' add_polygon_background); every other dataset its own."""
    if task == "semantic" and not per_pixel(task, cfg) and nc is not None and nc > 1:
        return nc + 1
    return nc


@dataclass
class Scan:
    root: Path  # where the images were looked for (dataset_root)
    train_images: int | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def scan(cfg: dict, yaml_path: Path, nc: int | None, task: str = "detect") -> Scan:
    """Count the training images and check both splits' labels (Ultralytics' verify_image_label rules:
    5 values or a polygon per line, integer class in [0, nc), coordinates normalised). A split whose
    images have no label at all is an error (it would train to mAP 0); some images without labels are
    background images, which Ultralytics trains on, and get a warning. Semantic masks and depth maps:
    pixel_targets.scan. Paths stay strings: pathlib objects cost 3x the time of the walk itself on 50k images."""
    root = dataset_root(cfg, yaml_path)
    result = Scan(root=root, train_images=0)
    for split in ("train", "val"):
        images: list[str] = []
        entries = split_entries(cfg, split, root)
        said = len(result.problems)
        for entry in entries:
            listed = _list_images(entry, split, result.problems)
            if listed is None:
                result.train_images = None if split == "train" else result.train_images
                break
            images += listed
        else:
            if split == "train":
                result.train_images = len(images)
            if not images:
                if len(result.problems) > said:  # the walk already said why (a folder of non-images)
                    continue
                result.problems.append(f"data: no {split} images in {', '.join(map(str, entries))} (image files "
                                       "are those Ultralytics reads: .jpg, .png, ...)")
                continue
            if per_pixel(task, cfg):
                targets = pixel_targets.scan(task, split, sorted(images), cfg, nc)
                result.problems += targets.problems
                result.warnings += targets.warnings
                continue
            kpt_dims = cfg["kpt_shape"][1] if task == "pose" else 0
            _check_labels(split, sorted(images), nc, result, task, label_values(task, cfg), kpt_dims)
    return result


def _list_images(entry: Path, split: str, problems: list[str]) -> list[str] | None:
    """The images of one `train:`/`val:` entry (a folder walked recursively, or a txt list of paths);
    None past MAX_IMAGES_COUNTED. A folder full of other files (a wrong `path:`) stops the walk."""
    if entry.is_file() or (entry.exists() and not entry.is_dir()):
        raw, why = read_regular_bounded(str(entry), MAX_LIST_BYTES)
        if raw is None or len(raw) > MAX_LIST_BYTES:
            problems.append(f"data: {split} list {entry} " + (f"cannot be read ({why})" if raw is None else
                            f"is more than {MAX_LIST_BYTES >> 20} MiB; expected a text file of image paths"))
            return []
        base = entry.parent
        lines = [ln.strip() for ln in raw.decode(errors="replace").splitlines() if ln.strip()]
        return [ln if os.path.isabs(ln) else os.path.normpath(os.path.join(base, ln)) for ln in lines]
    images: list[str] = []
    others = 0
    stack = [str(entry)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                        others += 1
                    elif os.path.splitext(e.name)[1].lower() in IMAGE_SUFFIXES:
                        images.append(e.path)
                        if len(images) >= MAX_IMAGES_COUNTED:
                            return None
                    else:
                        others += 1
                    if others > MAX_OTHER_ENTRIES and others > 2 * len(images):
                        problems.append(f"data: {split} folder {entry} holds more than {MAX_OTHER_ENTRIES:,} files "
                                        "and folders that are not images; point it at the images")
                        return []
        except OSError:
            continue
    return images


_IMAGES, _LABELS = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"


def label_path(image: str) -> str:
    """Ultralytics' img2label_paths: the last /images/ becomes /labels/, the suffix .txt."""
    if _IMAGES in image:
        image = _LABELS.join(image.rsplit(_IMAGES, 1))
    return os.path.splitext(image)[0] + ".txt"


def _check_labels(split: str, images: list[str], nc: int | None, result: Scan, task: str, values: int | None,
                  kpt_dims: int) -> None:
    checked = images[:MAX_LABEL_FILES_CHECKED]
    problems: list[str] = []
    unlabelled = 0
    for image in checked:
        label = label_path(image)
        lines, unreadable = _label_lines(label)
        if unreadable:
            problems.append(f"data: {label}: {unreadable}")
            continue
        if not lines:
            unlabelled += 1
            continue
        for number, line in lines:
            why = _bad_label(line, nc, task, values, kpt_dims)
            if why:
                problems.append(f"data: {label}:{number}: {why}")
                break
    if unlabelled == len(checked):
        result.problems.append(f"data: none of the {len(checked)} {split} images has a label "
                               f"(expected e.g. {label_path(checked[0])}); it would train to mAP 0")
    elif unlabelled:
        result.warnings.append(f"data: {unlabelled} of {len(checked)} {split} images have no labels: Ultralytics "
                               "trains them as background images")
    result.problems += problems[:MAX_LABEL_PROBLEMS]
    if len(problems) > MAX_LABEL_PROBLEMS:
        result.problems.append(f"data: ... and {len(problems) - MAX_LABEL_PROBLEMS} more {split} label files "
                               "with problems")


def _label_lines(path: str) -> tuple[list[tuple[int, str]], str | None]:
    """A label file's non-empty lines, numbered; or why it cannot be a label file (a FIFO, a device,
    more than MAX_LABEL_BYTES). A missing file is no lines: a background image."""
    if not os.path.lexists(path):
        return [], None
    raw, why = read_regular_bounded(path, MAX_LABEL_BYTES)
    if raw is None:
        return [], (None if not os.path.exists(path) else f"cannot be read as a label file ({why})")
    if len(raw) > MAX_LABEL_BYTES:
        return [], f"is more than {MAX_LABEL_BYTES >> 20} MiB; a label file holds a few lines per object"
    text = raw.decode("utf-8", errors="replace")
    return [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()], None


LINE_FORMATS = {"detect": "5 values (class x y w h) or a polygon (class x1 y1 x2 y2 ...)",
                "segment": "a polygon (class x1 y1 x2 y2 x3 y3 ...: at least 3 points)",
                "obb": "9 values (class x1 y1 x2 y2 x3 y3 x4 y4: the rotated box's corners)",
                "pose": "class x y w h and then the keypoints (kpt_shape)",
                "semantic": "a polygon (class x1 y1 x2 y2 x3 y3 ...), which Ultralytics rasterises; or give the "
                            "data.yaml a masks_dir of PNG masks"}


def _bad_label(line: str, nc: int | None, task: str = "detect", expected: int | None = 5,
               kpt_dims: int = 0) -> str | None:
    try:
        values = [float(v) for v in line.split()]
    except ValueError:
        return f"not numbers: {line.strip()[:60]!r}"
    if not all(math.isfinite(v) for v in values):
        return f"not finite numbers (nan or inf): {line.strip()[:60]!r}"
    polygon = len(values) > 6 and len(values) % 2 == 1
    if not (len(values) == expected or (task in ("detect", "segment", "semantic") and polygon)):
        return (f"expected {LINE_FORMATS[task]} for task {task}" + (f": {expected} values" if task == "pose" else "")
                + f", got {len(values)}")
    cls = values[0]
    if cls != int(cls) or cls < 0 or (nc is not None and cls >= nc):
        limit = f" 0..{nc - 1}" if nc else ""
        return f"class {values[0]:g} is not a class id{limit}"
    coords = values[1:]
    if task == "pose" and kpt_dims == 3:  # the third number of a keypoint is its visibility (0, 1, 2)
        coords = values[1:5] + [v for i, v in enumerate(values[5:]) if i % 3 != 2]
    if max(coords) > 1.0 or min(coords) < -0.01:  # Ultralytics' own tolerance
        return f"coordinates must be normalised to 0..1 (got {', '.join(f'{v:g}' for v in coords)})"
    return None


@dataclass
class FolderScan:
    train_images: int | None
    nc: int | None
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def scan_folders(root: Path) -> FolderScan:
    """A classify dataset as Ultralytics' check_cls_dataset and torchvision's ImageFolder read it:
    train/ and val/ (else test/) hold one folder per class, each with images. A val split whose class
    folders differ from train's would number the classes differently (ImageFolder numbers each split's
    own folders), so its metrics would be wrong, silently: refused."""
    label = f"data: classify dataset {root}"
    if not root.is_dir():
        return FolderScan(None, None, [f"{label} is not a folder (a classify dataset is a folder with train/ and "
                                       "val/ inside, one folder per class in each)"])
    val = next((root / s for s in ("val", "test") if (root / s).is_dir()), None)
    if not (root / "train").is_dir() or val is None:
        missing = " and ".join(s for s, ok in (("train/", (root / "train").is_dir()), ("val/ (or test/)", val))
                               if not ok)
        return FolderScan(None, None, [f"{label} has no {missing} folder"])
    found = FolderScan(train_images=0, nc=None)
    classes = {}
    for split in (root / "train", val):
        folders = sorted(d for d in split.iterdir() if d.is_dir())
        classes[split.name] = [d.name for d in folders]
        for folder in folders:
            images = _list_images(folder, split.name, found.problems) or []
            if not images:
                found.problems.append(f"{label}: {split.name}/{folder.name} has no images (torchvision's ImageFolder "
                                      "refuses an empty class folder)")
            if split.name == "train":
                found.train_images += len(images)
    train, other = classes["train"], classes[val.name]
    if not train:
        found.problems.append(f"{label}: train/ has no class folders")
    elif train != other:
        found.problems.append(f"{label}: {val.name}/ has class folders {other}, train/ has {train}; they must be the "
                              "same (each split numbers its own folders)")
    found.nc = len(train) or None
    return found
