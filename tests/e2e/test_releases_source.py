"""The release boundaries of orchestrator/scaling/releases.py, checked on the releases' own source: each
change's new form is absent from the release before it and present from it on (and in the pin). The
wheels come from PyPI (`pip download --no-deps`, about 1 MB each) into the test cache, read as zip files;
nothing is installed."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from orchestrator.scaling import releases

pytestmark = pytest.mark.slow
PREVIOUS = {(8, 4, 0): "8.3.253"}  # the release before each boundary, where not N-1


def _wheel(version: str) -> Path:
    folder = Path(os.environ.get("YOLO_ORCH_CACHE", Path.home() / ".cache" / "yolo-orch")) / "ultralytics-wheels"
    found = list(folder.glob(f"ultralytics-{version}-*.whl"))
    if not found:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"ultralytics=={version}", "-d",
                            str(folder)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"cannot download ultralytics {version} in CI: {r.stderr.strip()[-300:]}")
            pytest.skip(f"no package index here: {r.stderr.strip()[-200:]}")
        found = list(folder.glob(f"ultralytics-{version}-*.whl"))
    return found[0]


def _source(version: str, file: str) -> str:
    with zipfile.ZipFile(_wheel(version)) as wheel:
        return wheel.read(f"ultralytics/{file}").decode()


def _before(since: tuple[int, int, int]) -> str:
    return PREVIOUS.get(since, releases.text((since[0], since[1], since[2] - 1)))


@pytest.mark.parametrize("change", releases.CHANGES, ids=[releases.text(c.since) for c in releases.CHANGES])
def test_each_change_begins_where_the_table_says(change):
    assert change.marker not in _source(_before(change.since), "engine/trainer.py")
    assert change.marker in _source(releases.text(change.since), "engine/trainer.py")


def test_the_oldest_working_release_is_the_first_with_what_the_worker_imports():
    file, marker = releases.OLDEST_MARKER
    assert marker not in _source(_before(releases.OLDEST_WORKING), file)
    assert marker in _source(releases.text(releases.OLDEST_WORKING), file)


@pytest.mark.parametrize("task", sorted(releases.TASK_MINIMUM))
def test_each_new_task_begins_where_the_table_says(task):
    since, file, marker = releases.TASK_MINIMUM[task]
    assert marker not in _source(_before(since), file).split("TASKS =", 1)[1].split("\n", 1)[0]
    assert marker in _source(releases.text(since), file).split("TASKS =", 1)[1].split("\n", 1)[0]


def test_yolo26_begins_where_the_table_says():
    since, path = releases.FAMILY_MINIMUM["yolo26"]
    with zipfile.ZipFile(_wheel(_before(since))) as wheel:
        assert f"ultralytics/{path}" not in wheel.namelist()
    with zipfile.ZipFile(_wheel(releases.text(since))) as wheel:
        assert f"ultralytics/{path}" in wheel.namelist()
