"""The light CLI paths (--help, plan, submit --dry-run, schema, the dashboard's server) must not import
torch or ultralytics: they would cost seconds of start-up. Every task's plan included, and a run placed on
Ray (its cluster a listening socket here: the plan only checks that something answers), without ray."""

from __future__ import annotations

import subprocess
import sys

from conftest import cli_env

PROBE = r"""
import os, socket, sys
from typer.testing import CliRunner
from orchestrator.cli.app import app
runner = CliRunner()
tasks = [["plan", sys.argv[1], "--set", f"model={m}", "--json"]
         for m in ("yolo11n-seg.yaml", "yolo11n-pose.yaml", "yolo11n-obb.yaml", "yolo11n-cls.yaml")]
head = socket.create_server(("127.0.0.1", 0))
os.environ["RAY_ADDRESS"] = f"127.0.0.1:{head.getsockname()[1]}"
on_ray = ["--launcher", "ray", "-d", "2xcpu:1", "--dry-run", "--json"]
for args in (["--help"], ["plan", sys.argv[1], "-d", "cpu", "-d", "4", "--json"],
             ["submit", sys.argv[1], "--dry-run", "--json"], ["schema"], ["train", "--help"], ["ui", "--help"], *tasks,
             ["submit", sys.argv[1], *on_ray], ["k8s", sys.argv[1], "--image", "r/i:1", "--set", "model=yolo11n.yaml"]):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (args, result.output)
from orchestrator.ui.server import create_app, plotly_js  # the dashboard's server: starlette, uvicorn, no torch
from orchestrator.ui.store import Store
import uvicorn
create_app(Store("registry.db"), ".")
assert plotly_js().is_file()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "ultralytics", "torchvision", "cv2", "wandb", "ray"))
print("HEAVY", heavy)
"""


def test_light_paths_import_no_torch(tiny_job):
    result = subprocess.run([sys.executable, "-c", PROBE, str(tiny_job)], env=cli_env(), capture_output=True,
                            text=True, cwd=tiny_job.parent, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout, result.stdout

