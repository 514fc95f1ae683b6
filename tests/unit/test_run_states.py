"""A run's life as data (orchestrator/registry/states.py): every pair of states tried against a real registry,
as Optuna's storage tests loop over every trial state. A legal move is made and written with its fields; every
other one is refused and changes nothing; nothing but `move` writes a state."""

from __future__ import annotations

import itertools
import re
import sqlite3
from pathlib import Path

import pytest

from orchestrator.harness.runs import legal_path, walk_to
from orchestrator.registry import MOVES, RESUMABLE, IllegalMove, Registry, RunState, moves_table

REPO = Path(__file__).resolve().parents[2]
PAIRS = list(itertools.product(RunState, RunState))


@pytest.fixture
def reg(tmp_path, monkeypatch):
    monkeypatch.delenv("YOLO_ORCH_REGISTRY", raising=False)
    with Registry.open(tmp_path / "runs") as r:
        yield r


def stored(reg: Registry, run_id: str) -> tuple:
    """The row as written on disk (state, notes, exit code), read past the registry's own reads."""
    con = sqlite3.connect(f"file:{reg.path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT state, notes, exit_code FROM runs WHERE id = ?", (run_id,)).fetchone()
    finally:
        con.close()


@pytest.mark.parametrize("frm,to", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_every_pair_of_states(reg, tmp_path, frm, to):
    reg.add_run("r", job="tiny", run_dir=tmp_path / "r")  # this process owns it: alive, never reconciled
    walk_to(reg, "r", frm)
    assert stored(reg, "r")[0] == frm
    if to in MOVES[frm]:
        assert reg.move("r", to, exit_code=7, note=f"{frm} -> {to}")
        state, notes, exit_code = stored(reg, "r")
        assert (state, exit_code) == (to, 7) and f"{frm} -> {to}" in notes
    else:
        before = stored(reg, "r")
        with pytest.raises(IllegalMove, match=f"cannot move from {frm} to {to}"):
            reg.move("r", to, exit_code=7, note="refused")
        assert stored(reg, "r") == before


def test_nothing_but_move_writes_a_state(reg, tmp_path):
    row = reg.add_run("r", job="tiny", run_dir=tmp_path / "r")
    assert row.state == RunState.QUEUED  # every run starts queued: add_run takes no state
    with pytest.raises(TypeError):
        reg.add_run("s", job="tiny", state="finished")
    with pytest.raises(ValueError, match="written by Registry.move"):
        reg.update("r", state="finished")
    assert stored(reg, "r")[0] == "queued"


def test_a_move_from_a_state_the_caller_did_not_read_is_lost(reg, tmp_path):
    """Compare-and-set: two resumes claim one killed run; the second, which read it killed, loses."""
    reg.add_run("r", job="tiny", run_dir=tmp_path / "r")
    assert reg.move("r", RunState.KILLED)
    assert reg.move("r", RunState.QUEUED, expect=RunState.KILLED)
    assert not reg.move("r", RunState.QUEUED, expect=RunState.KILLED)
    assert stored(reg, "r")[0] == "queued"


def test_every_state_is_reached_and_the_table_says_what_resume_continues():
    assert all(legal_path(RunState.QUEUED, s) is not None for s in RunState)
    assert set(RESUMABLE) == {s for s in RunState if RunState.QUEUED in MOVES[s]}
    assert MOVES[RunState.PRUNED] == {}  # final; finished only becomes pruned (a sweep's verdict)
    assert set(MOVES[RunState.FINISHED]) == {RunState.PRUNED}


def test_the_architecture_page_shows_the_table():
    """docs/architecture.md's table of a run's life is the code's, row for row."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("### A run's life", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| (.+?) \|$", section, re.M)
    assert rows == moves_table()
