"""What `plan`, `data synth` and `data import` do, without a terminal: the job planned for each target asked
for (its data described once for all of them), a generated dataset written, an annotation export written as a
YOLO dataset. The commands render what these return."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.devices import DeviceSpecError, parse_devices
from orchestrator.errors import UserError
from orchestrator.scaling.types import POLICIES


@dataclass(frozen=True)
class Planned:
    """`plan`: the loaded job and one Plan per target (the job's own target when none was asked for)."""

    job: object  # jobspec.loader.LoadedJob
    plans: list  # [plan.Plan]


def plan_targets(job_file: Path, devices: list[str], policy: str | None, sets: list[str]) -> Planned:
    """Every target's plan, or one UserError with every problem: the flags' first, then each target's lines
    (tagged `[--devices D]` when there are several)."""
    from orchestrator.jobspec.job_data import describe_data
    from orchestrator.jobspec.loader import load_job
    from orchestrator.plan import make_plan

    problems = [] if policy is None or policy in POLICIES else [
        f"--policy: unknown policy '{policy}'; expected one of {', '.join(POLICIES)}"]
    wanted = []
    for d in devices:
        try:
            wanted.append(parse_devices(d))
        except DeviceSpecError as exc:
            problems += exc.under("--devices").problems
    if problems:
        raise UserError(problems)
    job = load_job(job_file, sets=sets)
    targets = wanted or [None]  # None: the job's target.devices
    data = describe_data(job)  # the same for every target: the dataset folder is walked once
    plans, errors = [], []
    for d in targets:
        try:
            plans.append(make_plan(job, devices=d, policy=policy, data=data))
        except UserError as exc:
            errors += [f"{line} [--devices {d}]" if len(targets) > 1 else line for line in exc.problems]
    if errors:
        raise UserError(errors)
    return Planned(job, plans)


def synth_dataset(out_dir: Path, images: int, val_images: int, classes: int, imgsz: int, seed: int,
                  task: str) -> Path:
    """`data synth`: the generated dataset's data.yaml (classify: its folder); bad settings and an unwritable
    place are the user's, one line each naming the flag."""
    from orchestrator.data.synth import generate_dataset

    try:
        return generate_dataset(out_dir, images=images, val_images=val_images, classes=classes, imgsz=imgsz,
                                seed=seed, task=task)
    except ValueError as exc:
        raise UserError([f"--{line.replace('_', '-')}" for line in str(exc).splitlines()]) from None
    except FileExistsError as exc:
        raise UserError(f"--out: {exc}") from None
    except OSError as exc:  # /proc/x, a read-only or full file system: nothing is left half-written there
        raise UserError(f"--out: cannot write a dataset at {out_dir}: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class Imported:
    """What `data import` wrote: the dataset's data.yaml and what it holds."""

    data: Path
    source: str  # coco or ndjson
    task: str
    images: dict[str, int]  # per split
    names: tuple[str, ...]
    warnings: tuple[str, ...]


def import_dataset(source: Path, out: Path, val: Path | None = None, images: Path | None = None,
                   link: bool = False, download: bool = False) -> Imported:
    """`data import`: a COCO export (SOURCE the training split's file, with --val and --images) or an NDJSON file
    read and checked as a job's data is (jobspec/coco.py, ndjson.py), written as a YOLO dataset at `out`, a
    folder that must not exist yet: images copied (`link`: linked), labels, a data.yaml without `path:` (the
    folder can be moved). Written whole in a scratch folder beside it and renamed into place. `download`: an
    NDJSON file's images known only by URL are fetched (the one command that touches the network, and only
    when asked)."""
    from orchestrator.jobspec import coco_convert
    from orchestrator.jobspec.ndjson import SUFFIXES as NDJSON_SUFFIXES

    out = Path(out).expanduser().absolute()
    if out.exists() or out.is_symlink():
        raise UserError(f"--out: {out} exists; name a new folder (an import never writes into one)")
    place = coco_convert.link_image if link else coco_convert.copy_image
    if source.suffix.lower() in NDJSON_SUFFIXES:
        if val is not None or images is not None:
            raise UserError("--val/--images: apply to a COCO export; an NDJSON file names its images itself")
        return _import_ndjson(source, out, place, download)
    if download:
        raise UserError("--download: applies to an NDJSON file's images (a COCO export's are in --images)")
    if val is None or images is None:
        raise UserError("SOURCE: a COCO export's training file needs --val VAL.json and --images FOLDER (an NDJSON "
                        "file ends in .ndjson)")
    return _import_coco({"train": (source.resolve(), images.resolve()), "val": (val.resolve(), images.resolve())},
                        out, place)


OUT_HINT = "free space there or name another folder"


def _import_ndjson(source: Path, out: Path, place, download: bool) -> Imported:
    from orchestrator.jobspec import ndjson_convert
    from orchestrator.jobspec.coco_convert import publish
    from orchestrator.jobspec.ndjson import SPLITS, read_ndjson

    def place_or_fetch(src, target: Path) -> None:  # a str source is a URL (read_ndjson's `download`)
        (ndjson_convert.download_image if isinstance(src, str) else place)(src, target)

    data = read_ndjson(source, "SOURCE", download=download)
    publish(out / "data.yaml", lambda folder: ndjson_convert.write_dataset(data, folder, None, place_or_fetch),
            "--out", OUT_HINT)
    counts = {split: len(data.split(split)) for split in SPLITS if data.split(split)}
    return Imported(out / "data.yaml", "ndjson", data.task, counts, data.names, tuple(data.warnings))


def _import_coco(splits: dict[str, tuple[Path, Path]], out: Path, place) -> Imported:
    from orchestrator.jobspec.coco import read_coco
    from orchestrator.jobspec.coco_convert import publish, write_dataset

    coco = read_coco(splits, "SOURCE")
    publish(out / "data.yaml", lambda folder: write_dataset(splits, coco, coco.task, folder, None, place),
            "--out", OUT_HINT)
    counts = {split: len(list((out / "images" / split).iterdir())) for split in splits}
    return Imported(out / "data.yaml", "coco", coco.task, counts, coco.names, coco.warnings)
