"""scripts/setup.sh as a user meets it after an interrupted first run (issue 60): a setup killed during
`python -m venv` left a python without pip, and every rerun failed with "No module named pip". The rerun
sees it and makes the environment again. The install after that is left to fail at once (no package index
reachable: PIP_NO_INDEX), so the test costs seconds, not a whole install; the whole install from a half-made
environment was run by hand (docs/install.md)."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO


def test_a_half_made_environment_is_made_again(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # what the kill left
    assert subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"], capture_output=True).returncode
    env = {**os.environ, "YOLO_ORCH_VENV": str(venv), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": ""}
    r = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], env=env, capture_output=True, text=True,
                       timeout=300)
    assert "is half-made (no working pip: an interrupted setup?); making it again" in r.stderr, r.stderr
    assert "No module named pip" not in r.stderr
    assert subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--version"]).returncode == 0  # made again
    assert r.returncode != 0 and "pip==26.3" in r.stderr  # then the install, without an index, said why it failed
    assert not (venv / ".yolo-orch-setup").exists()  # and nothing claims the environment is ready


def test_a_folder_that_is_no_environment_is_left_alone(tmp_path):
    folder = tmp_path / "venv"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine\n")
    r = subprocess.run(["bash", str(REPO / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "YOLO_ORCH_VENV": str(folder)})
    assert r.returncode == 1 and "exists and is not a virtual environment" in r.stderr, r.stderr
    assert (folder / "notes.txt").read_text() == "mine\n"
