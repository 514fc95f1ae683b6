"""The dashboard's reads (orchestrator/ui/store.py) without a browser: curves and timeline from
events.jsonl, secrets masked, files confined to their run, filters, and a registry left as it was."""

from __future__ import annotations

import json
from pathlib import Path

from orchestrator.harness.runs import walk_to
from orchestrator.registry import Registry
from orchestrator.ui.store import Store, mask, redacted


def _registry(tmp_path: Path) -> tuple[Store, Path]:
    runs = tmp_path / "runs"
    run_dir = runs / "job_a" / "r1"
    run_dir.mkdir(parents=True)
    events = [{"event": "train_start", "time": 1, "start_epoch": 0},
              {"event": "epoch", "time": 2, "epoch": 1, "metrics": {"metrics/mAP50(B)": 0.1, "lr/pg0": 0.01}},
              {"event": "oom", "time": 3, "batch": 16},
              {"event": "oom_restart", "time": 4, "batch_per_device": 8},
              {"event": "train_start", "time": 5, "start_epoch": 1},
              {"event": "epoch", "time": 6, "epoch": 2, "metrics": {"metrics/mAP50(B)": 0.3, "lr/pg0": 0.02}},
              {"event": "epoch", "time": 7, "epoch": 2, "metrics": {"metrics/mAP50(B)": 0.4, "lr/pg0": 0.02}},
              {"event": "stalled", "time": 8, "rank": 1},
              {"event": "progress", "time": 9, "epoch": 3, "batch": 1}]
    (run_dir / "events.jsonl").write_text("\n".join(json.dumps(e) for e in events) + "\n{half a line")
    (run_dir / "train.log").write_text("step 1\r step 2\r step 3\nurl postgresql://u:hunter2@db/x token=abc123\n")
    (run_dir / "results.csv").write_text("epoch\n1\n")
    (run_dir / "outside").symlink_to("/etc/passwd")
    with Registry.open(runs) as reg:
        reg.add_run("r1", job="job_a", run_dir=run_dir, tags={"study": "s_1"})
        walk_to(reg, "r1", "finished")
        reg.add_run("r2", job="job%b")
        walk_to(reg, "r2", "failed")
    return Store(runs / "registry.db"), runs


def test_curves_keep_the_last_record_of_an_epoch_and_the_timeline_its_events(tmp_path):
    store, _ = _registry(tmp_path)
    detail = store.detail(store.get("r1"))
    curves = detail["events"]["curves"]
    assert curves["epoch"] == [1, 2] and curves["metrics/mAP50(B)"] == [0.1, 0.4]
    assert [e["event"] for e in detail["events"]["timeline"]] == ["train_start", "oom", "oom_restart", "train_start",
                                                                  "stalled"]
    assert detail["events"]["unreadable_lines"] == 0  # "{half a line": no newline yet, maybe being written
    assert "hunter2" not in detail["log"] and "abc123" not in detail["log"] and "step 3" in detail["log"]
    assert "step 1" not in detail["log"]  # a line redrawn with \r: its last state only


def test_files_stay_inside_their_run(tmp_path):
    store, runs = _registry(tmp_path)
    record = store.get("r1")
    assert store.file_path(record, "results.csv") == (runs / "job_a" / "r1" / "results.csv").resolve()
    for path in ("../../registry.db", "/etc/passwd", "outside", "../r1/../../registry.db", "nope.txt", "a\x00b"):
        assert store.file_path(record, path) is None, path
    assert "outside" not in [f["path"] for f in store.detail(record)["files"]]


def test_filters_are_substrings_with_like_wildcards_taken_literally(tmp_path):
    store, _ = _registry(tmp_path)
    assert [r["id"] for r in store.runs()["runs"]] == ["r2", "r1"]
    assert [r["id"] for r in store.runs(name="job%")["runs"]] == ["r2"]
    assert [r["id"] for r in store.runs(name="job_")["runs"]] == ["r1"]
    assert [r["id"] for r in store.runs(tags="s_1")["runs"]] == ["r1"]
    assert [r["id"] for r in store.runs(state="failed")["runs"]] == ["r2"]
    assert store.runs(state="bogus")["total"] == 2  # an unknown state filters nothing, breaks nothing


def test_reading_leaves_the_registry_as_it_was(tmp_path):
    """The database file keeps its bytes. (SQLite itself deletes an empty -wal when the last
    connection to the file closes, a reader's too: that is not a change of the registry.)"""
    store, runs = _registry(tmp_path)
    db, wal = runs / "registry.db", runs / "registry.db-wal"
    before = (db.read_bytes(), wal.read_bytes() if wal.exists() else b"")
    for _ in range(3):
        store.runs()
        store.detail(store.get("r1"))
        store.trials("s_1")
    assert db.read_bytes() == before[0]
    assert (wal.read_bytes() if wal.exists() else b"") == before[1]


def test_secrets_are_masked_by_key_and_in_urls():
    shown = mask({"passed": {"lr0": 0.01}, "wandb": {"api_key": "k", "project": "p"}, "password": "x",
                  "storage": "postgresql://u:pw1234@db/s?sslpassword=zz", "author": "me"})
    assert shown["passed"] == {"lr0": 0.01} and shown["wandb"] == {"api_key": "***", "project": "p"}
    assert shown["password"] == "***" and shown["author"] == "me"
    assert "pw1234" not in shown["storage"] and "zz" not in shown["storage"]
    assert redacted("see https://user:tok3n@host/x and password: abc") == "see https://user:***@host/x and password: ***"


def test_a_run_whose_process_vanished_shows_killed_and_filters_as_shown(tmp_path):
    import subprocess
    import sys

    store, runs = _registry(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    with Registry.open(runs) as reg:
        reg.add_run("r3", job="job_c", pid=gone.pid)
        walk_to(reg, "r3", "running")
    before = (runs / "registry.db").read_bytes()
    assert store.get("r3")["state"] == "killed" and not store.get("r3")["active"]
    assert "vanished" in store.get("r3")["notes"][-1]["text"]
    assert [r["id"] for r in store.runs(state="killed")["runs"]] == ["r3"]
    assert store.runs(state="killed")["total"] == 1 and store.runs(state="running")["runs"] == []
    assert [r["id"] for r in store.runs(state="failed")["runs"]] == ["r2"]
    assert (runs / "registry.db").read_bytes() == before  # shown, not written
