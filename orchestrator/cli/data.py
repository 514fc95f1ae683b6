"""`yolo-orch data synth`: generate a synthetic dataset for any Ultralytics task."""

from __future__ import annotations

from pathlib import Path

import typer

from orchestrator.cli.common import print_json, out

data_app = typer.Typer(help="Datasets: generate synthetic data.", no_args_is_help=True)


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


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
