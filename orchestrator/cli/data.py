"""`yolo-orch data synth`: generate a synthetic dataset for any Ultralytics task. `yolo-orch data import`: a
COCO or NDJSON export written as a YOLO dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.common import print_json, out

data_app = typer.Typer(help="Datasets: generate synthetic data; import a COCO or NDJSON export.", no_args_is_help=True)


@data_app.command("synth")
def synth_cmd(
    out_dir: Path = typer.Option(..., "--out", help="Folder to write the dataset into."),
    images: int = typer.Option(128, "--images", help="Training images."),
    val_images: int = typer.Option(32, "--val-images", help="Validation images."),
    classes: int = typer.Option(3, "--classes", help="Number of shape classes (1-8)."),
    imgsz: int = typer.Option(128, "--imgsz", help="Image size in pixels."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same bytes)."),
    task: str = typer.Option("detect", "--task", help="detect, segment, pose, obb, classify, semantic or depth: the labels, masks or depth maps written."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Write a deterministic synthetic dataset in the task's Ultralytics format (boxes, polygons,
    keypoints, rotated boxes, or a folder per class)."""
    from orchestrator.application.planning import synth_dataset

    data_yaml = synth_dataset(out_dir, images, val_images, classes, imgsz, seed, task)
    if json_out:
        print_json({"data": str(data_yaml), "task": task, "images": images, "val_images": val_images,
                    "classes": classes})
    else:
        out.print(f"wrote {images} train + {val_images} val {task} images, {classes} classes -> [bold]{data_yaml}[/]")


@data_app.command("import")
def import_cmd(
    source: Path = typer.Argument(..., help="An NDJSON file (.ndjson), or a COCO export's training annotations."),
    out_dir: Path = typer.Option(..., "--out", help="A new folder to write the YOLO dataset into."),
    val: Optional[Path] = typer.Option(None, "--val", help="COCO: the validation split's annotation file."),
    images: Optional[Path] = typer.Option(None, "--images", help="COCO: the folder the files' images are in."),
    link: bool = typer.Option(False, "--link", help="Link the images instead of copying them."),
    download: bool = typer.Option(False, "--download", help="NDJSON: fetch the images known only by URL (the only "
                                  "time yolo-orch downloads data; signed URLs expire)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Write a COCO or NDJSON export as a YOLO dataset (images, labels, data.yaml), checked as a job's data is,
    without training: classes in the file's order with their names, one line per problem."""
    from orchestrator.application.planning import import_dataset

    done = import_dataset(source, out_dir, val, images, link, download)
    if json_out:
        print_json({"data": str(done.data), "source": done.source, "task": done.task, "images": done.images,
                    "names": list(done.names), "warnings": list(done.warnings)})
        return
    counts = " + ".join(f"{n} {split}" for split, n in done.images.items())
    out.print(f"imported {counts} {done.task} images, {len(done.names)} classes -> [bold]{done.data}[/]")
    for warning in done.warnings:
        out.print(f"  [yellow]![/] {warning}")


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
