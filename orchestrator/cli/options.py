"""Options several commands share, declared once: Typer reads each default as the option's spec."""

from __future__ import annotations

import typer

JSON_OUT = typer.Option(False, "--json", help="Machine-readable output on stdout.")
SETS = typer.Option(None, "--set", help="Override a job field: KEY=VALUE (dotted keys).")
RUNS_DIR = typer.Option("runs", "--runs-dir", help="The runs folder whose registry.db to read.")
REGISTRY = typer.Option(None, "--registry", help="Registry file (default: RUNS_DIR/registry.db or $YOLO_ORCH_REGISTRY).")
