"""scripts/setup.sh as a user meets it after an interrupted first run (issue 60): a setup killed during
`python -m venv` left a python without pip, and every rerun failed with "No module named pip". It is made
again, from the pinned and hashed installers and the resolved files (a real install, from uv's cache)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def test_a_half_made_environment_is_made_again(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # what the kill left
    try:
        r = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env={**os.environ, "YOLO_ORCH_VENV": str(venv)},
                           capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "is half-made (no working pip" in r.stderr
        assert subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"]).returncode == 0
        shown = subprocess.run([str(venv / "bin" / "yolo-orch"), "--help"], capture_output=True, text=True)
        assert shown.returncode == 0 and "submit" in shown.stdout
        again = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], capture_output=True, text=True,
                               env={**os.environ, "YOLO_ORCH_VENV": str(venv)}, timeout=120)
        assert again.returncode == 0 and "is up to date" in again.stderr
    finally:
        shutil.rmtree(venv, ignore_errors=True)  # (its files are uv's cache's, linked: this frees little)
