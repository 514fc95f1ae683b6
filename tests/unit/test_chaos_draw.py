"""bench/chaos.py's draw of episodes: a short campaign meets every kind once, and a kind whose run
ended before the fault struck is drawn again (CI's campaign once missed disk-full and counted another
kind twice)."""

from __future__ import annotations




def _chaos():
    import chaos  # bench/chaos.py (pyproject: pytest's pythonpath)

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


def test_a_campaign_of_run_faults_starts_no_service(tmp_path):
    """PostgreSQL, Slurm and the tmpfs start at the first episode that needs them: none here."""
    chaos = _chaos()
    services = chaos.Services(tmp_path)
    services.stop()
    assert (services._pg, services._cluster, services._disk) == (None, None, False)


def test_a_torn_tail_counts_only_when_a_resumed_worker_read_past_it(tmp_path):
    chaos = _chaos()
    events = tmp_path / "events.jsonl"
    events.write_bytes(b'{"event": "epoch", "epoch": 5}\n{"event": "epo')
    torn_at = events.stat().st_size
    with open(events, "ab") as f:  # the run closed as finished: a recovered event, no worker
        f.write(b'\n{"event": "epoch", "epoch": 5, "recovered": true}\n')
    assert not chaos.resumed_after(tmp_path, torn_at)
    with open(events, "ab") as f:
        f.write(b'{"event": "train_start", "start_epoch": 4}\n')
    assert chaos.resumed_after(tmp_path, torn_at)
