"""Atomic writes of the run directory's files: several writers of one file at once (two sweep
commands writing the study summary, the orchestrator and the worker writing summary.json)."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import pytest

from orchestrator.rundir import write_json_atomic, write_text_atomic


def _write_many(path: str, writer: int, times: int) -> None:
    for i in range(times):
        # large enough that a write takes several system calls
        write_json_atomic(Path(path), {"writer": writer, "i": i, "pad": [writer] * 20_000})


def test_concurrent_writers_never_publish_a_partial_file(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"writer": -1})
    ctx = mp.get_context("spawn")
    writers = [ctx.Process(target=_write_many, args=(str(path), w, 60)) for w in range(3)]
    for p in writers:
        p.start()
    reads = 0
    while any(p.is_alive() for p in writers):
        data = json.loads(path.read_text())  # a half-written file would not parse
        assert data["writer"] == -1 or data["pad"] == [data["writer"]] * 20_000
        reads += 1
    for p in writers:
        p.join()
        assert p.exitcode == 0  # no writer lost its temporary file to another
    assert reads > 0
    final = json.loads(path.read_text())
    assert final["i"] == 59
    assert sorted(f.name for f in tmp_path.iterdir()) == ["summary.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "summary.json"
    write_json_atomic(path, {"ok": 1})
    # a lone surrogate cannot be encoded: the write fails after the temporary file was created
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "half \ud800 written")
    assert json.loads(path.read_text()) == {"ok": 1}
    assert sorted(f.name for f in tmp_path.iterdir()) == ["summary.json"]


def test_a_torn_last_line_is_ended_before_the_next_record(tmp_path):
    """A worker killed in the middle of a line: the next attempt's first record must not be glued to
    the torn one (it would be lost with it); readers skip the torn line."""
    from orchestrator.rundir import EventTail, EventWriter, end_torn_line

    path = tmp_path / "events.jsonl"
    assert end_torn_line(path) is False  # no file yet
    EventWriter(path).emit("epoch", epoch=1)
    assert end_torn_line(path) is False  # whole lines: nothing to do
    with open(path, "ab") as f:
        f.write(b'{"event": "epoch", "epo')
    assert end_torn_line(path) is True
    EventWriter(path).emit("epoch", epoch=2)
    assert [e["epoch"] for e in EventTail(path).read_new()] == [1, 2]
