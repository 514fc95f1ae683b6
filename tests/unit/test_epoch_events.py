"""The epoch events of a resumed run: an epoch that was trained and checkpointed but whose event never
came (a kill between Ultralytics' save of last.pt and on_fit_epoch_end; a Slurm time limit in CI found
it) is written at the resume from its results.csv row, so every trained epoch is in events.jsonl once."""

from __future__ import annotations

import json
from types import SimpleNamespace

from orchestrator.rundir import EventWriter
from orchestrator.rundir import missing_epochs
from orchestrator.worker.callbacks import EpochReporter


def test_the_epoch_a_kill_left_without_its_event_is_written_at_the_resume(tmp_path):
    events = EventWriter(tmp_path / "events.jsonl")
    for epoch in (1, 2):
        events.emit("epoch", epoch=epoch, epochs=5, metrics={"metrics/mAP50(B)": 0.1 * epoch})
    (tmp_path / "results.csv").write_text(
        "                  epoch,             time, train/box_loss, metrics/mAP50(B)\n"
        "1,1.0,2.0,0.1\n2,2.0,1.9,0.2\n3,3.0,1.8,0.3\n3,3.5,1.8,0.3\n4,4.0,1.7,0.35\n")  # row 4: written, last.pt not (a kill)
    assert missing_epochs(events.path, upto=3) == [(3, {"train/box_loss": 1.8, "metrics/mAP50(B)": 0.3})]
    assert missing_epochs(events.path, upto=0) == []

    reporter = EpochReporter(events)
    reporter.on_train_start(SimpleNamespace(epochs=5, start_epoch=3, batch_size=2, accumulate=1, world_size=1))
    written = [json.loads(line) for line in events.path.read_text().splitlines()]
    assert [(e["event"], e.get("epoch")) for e in written] == [("epoch", 1), ("epoch", 2), ("train_start", None),
                                                               ("epoch", 3)]
    assert written[-1]["recovered"] is True and written[-1]["metrics"]["metrics/mAP50(B)"] == 0.3
    assert reporter.seen == {2}
    reporter.on_train_start(SimpleNamespace(epochs=5, start_epoch=3, batch_size=2, accumulate=1, world_size=1))
    assert sum(1 for line in events.path.read_text().splitlines() if '"epoch": 3' in line) == 1  # once


def test_completed_epochs_counts_only_checkpointed_epochs(tmp_path):
    """results.csv gets an epoch's row just before that epoch's last.pt: a row newer than last.pt is an
    epoch whose checkpoint never landed (a kill, a full disk), which a resume trains again; rows a resume
    repeats count once; no last.pt, nothing checkpointed."""
    import os

    from orchestrator.rundir import completed_epochs

    csv, last = tmp_path / "results.csv", tmp_path / "weights" / "last.pt"
    csv.write_text("epoch,time\n1,0.1\n2,0.2\n3,0.3\n")
    assert completed_epochs(tmp_path) == 0
    last.parent.mkdir()
    last.write_bytes(b"ckpt")
    os.utime(csv, ns=(10**18, 10**18))
    os.utime(last, ns=(10**18 + 1, 10**18 + 1))
    assert completed_epochs(tmp_path) == 3
    os.utime(csv, ns=(10**18 + 2, 10**18 + 2))  # epoch 3's row, and its checkpoint failed
    assert completed_epochs(tmp_path) == 2
    csv.write_text("epoch,time\n1,0.1\n2,0.2\n3,0.3\n3,0.31\n4,0.4\n")  # resumed: epoch 3 again
    os.utime(csv, ns=(10**18, 10**18))
    assert completed_epochs(tmp_path) == 4
