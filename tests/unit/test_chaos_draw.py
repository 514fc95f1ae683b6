"""bench/chaos.py's draw of episodes: a short campaign meets every kind once, and a kind whose run
ended before the fault struck is drawn again (CI's campaign once missed disk-full and counted another
kind twice)."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _chaos():
    sys.path.insert(0, str(REPO / "bench"))
    import chaos

    return chaos


def test_the_first_draws_are_every_kind_once():
    chaos = _chaos()
    draws = chaos.draw_episodes(1, chaos.KINDS)
    kinds = [next(draws).kind for _ in chaos.KINDS]
    assert sorted(kinds) == sorted(chaos.KINDS)


def test_a_kind_that_did_not_strike_is_drawn_again_next_and_the_turn_goes_on():
    chaos = _chaos()
    kinds = ("kill-worker", "disk-full", "torn-events")
    plain = chaos.draw_episodes(3, kinds)
    order = [next(plain).kind for _ in kinds]
    draws = chaos.draw_episodes(3, kinds)
    first = next(draws)
    again = draws.send(first.kind)
    assert again.kind == first.kind and again.number == first.number + 1
    rest = [draws.send(None).kind for _ in kinds[1:]]
    assert [first.kind, *rest] == order
