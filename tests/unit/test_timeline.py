"""The suite's timeline (orchestrator/harness/timeline.py): each test's line when asked for, and the sums."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

from orchestrator.harness.timeline import TIMELINE_ENV, record, summary


def test_a_line_per_test_only_when_asked(tmp_path, monkeypatch):
    path = tmp_path / "timeline.jsonl"
    monkeypatch.delenv(TIMELINE_ENV, raising=False)
    record("tests/unit/x.py::a", 0.0)
    assert not path.exists()
    monkeypatch.setenv(TIMELINE_ENV, str(path))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    record("tests/unit/x.py::a", 1.0)
    [line] = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert line["worker"] == "gw1" and line["test"] == "tests/unit/x.py::a" and line["end"] > line["start"] == 1.0


def test_the_summary_sums_by_process_and_module(tmp_path):
    path = tmp_path / "timeline.jsonl"
    rows = [("gw0", "tests/e2e/a.py::t1", 0, 10), ("gw1", "tests/e2e/b.py::t", 0, 4), ("gw1", "tests/e2e/a.py::t2", 5, 7)]
    path.write_text("".join(json.dumps({"worker": w, "test": t, "start": s, "end": e}) + "\n" for w, t, s, e in rows))
    text = summary(path)
    assert text.splitlines()[:3] == ["3 tests over 10 s", "gw0: 1 tests, busy 10 s, done at 10 s",
                                     "gw1: 2 tests, busy 6 s, done at 7 s"]
    assert "test seconds in all 16; by module:" in text
    assert text.index("tests/e2e/a.py") < text.index("tests/e2e/b.py")  # 12 s before 4 s


def test_no_file_is_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "orchestrator.harness.timeline", str(tmp_path / "none")], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "YOLO_ORCH_TEST_TIMELINE=FILE" in r.stderr
