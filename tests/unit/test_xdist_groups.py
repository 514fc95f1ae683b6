"""The suite's `xdist_group` marks really keep a group on one test process.

scripts/test.sh runs two test processes with `--dist loadgroup`; the Slurm tests and the chaos campaign share a
group (one Slurm cluster at a time) and the costly module fixtures (test_xla_train's `drive`, test_ui's `runs`)
rely on theirs to be made once. pytest 9.2 with pytest-xdist 3.6 silently ignored every mark (requirements/test.txt):
this runs the pinned pair on a small module and counts the fixture's set-ups.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

MODULE = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.fixture(scope="module")
def made_once():
    with open(os.environ["SETUPS"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")


@pytest.mark.parametrize("i", range(6))
def test_member(made_once, i):
    pass
'''


def test_a_group_runs_on_one_test_process(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own root: none of the suite's options or conftest
    setups = tmp_path / "setups.txt"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q",
         "test_grouped.py"],
        cwd=tmp_path, env={"SETUPS": str(setups), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout
    workers = setups.read_text().split()
    assert len(workers) == 1, f"the module fixture was made on {workers}: xdist_group is ignored"


def test_no_two_test_modules_share_a_basename():
    """The suite's folders are no packages: pytest imports each module by its basename, and a second module of the
    same name fails the whole run at collection ("import file mismatch"), as tests/e2e/test_k8s.py beside
    tests/unit/test_k8s.py once did in a fresh-clone CI."""
    modules = [p for p in Path(__file__).resolve().parents[1].rglob("test_*.py") if "__pycache__" not in p.parts]
    names = [p.name for p in modules]
    assert sorted({n for n in names if names.count(n) > 1}) == []
