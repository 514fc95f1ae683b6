"""A run's checkpoints read without torch (rundir/checkpoints.py): whole or damaged, at which epoch,
and the rewind a resume makes when weights/last.pt is damaged: the newest whole checkpoint, the
epochs after it declared to train again, results.csv's later rows moved aside, the damaged file kept."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.checkpoints import write_checkpoint
from orchestrator.rundir import EventTail, completed_epochs, trained_epochs
from orchestrator.rundir.checkpoints import (DAMAGED_LAST, REWOUND_RESULTS, fallback_checkpoint, inspect_checkpoint,
                                             rewind_to, rewind_to_start)


def flip_byte(path) -> None:
    """One byte flipped in the middle of the largest record's data (a flip in the alignment padding
    between records changes nothing that loads, and is rightly not called damage)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_whole_checkpoint_gives_its_epoch_and_a_damaged_one_says_why(tmp_path):
    ok = inspect_checkpoint(write_checkpoint(tmp_path / "a.pt", 3))
    assert ok.sound and ok.resumable and ok.epochs == 3
    stripped = inspect_checkpoint(write_checkpoint(tmp_path / "s.pt", 3, resumable=False))
    assert stripped.sound and not stripped.resumable and stripped.epochs == 0
    cut = write_checkpoint(tmp_path / "cut.pt", 3)
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    assert "BadZipFile" in inspect_checkpoint(cut).damage
    flipped = write_checkpoint(tmp_path / "flip.pt", 3)
    flip_byte(flipped)
    assert not inspect_checkpoint(flipped).sound
    (tmp_path / "x.pt").write_bytes(b"x")
    assert not inspect_checkpoint(tmp_path / "x.pt").sound
    assert inspect_checkpoint(tmp_path / "none.pt").damage == "missing"


def test_reading_a_checkpoint_runs_no_code_from_it(tmp_path):
    """The pickle names a function to call (os.system): stubbed, never called."""
    import pickle
    import zipfile

    class Evil:
        def __reduce__(self):
            return (subprocess.call, (["touch", str(tmp_path / "pwned")],))

    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"epoch": 1, "optimizer": {}, "x": Evil()}))
    found = inspect_checkpoint(path)
    assert found.sound and found.epochs == 2 and not (tmp_path / "pwned").exists()


def _run_dir(tmp_path, epochs: int):
    run = tmp_path / "run"
    (run / "weights").mkdir(parents=True)
    (run / "results.csv").write_text("epoch,loss\n" + "".join(f"{e},{1 / e:.3f}\n" for e in range(1, epochs + 1)))
    (run / "events.jsonl").write_text("".join(json.dumps({"event": "epoch", "epoch": e}) + "\n"
                                              for e in range(1, epochs + 1)))
    return run


def test_a_damaged_last_pt_rewinds_to_the_newest_whole_checkpoint(tmp_path):
    run = _run_dir(tmp_path, 4)
    write_checkpoint(run / "weights" / "epoch0.pt", 1)
    write_checkpoint(run / "weights" / "best.pt", 2)
    broken_epoch = write_checkpoint(run / "weights" / "epoch2.pt", 3)
    flip_byte(broken_epoch)
    last = write_checkpoint(run / "weights" / "last.pt", 4)
    flip_byte(last)
    damaged = last.read_bytes()
    fallback = fallback_checkpoint(run / "weights")
    assert fallback.path.name == "best.pt" and fallback.epochs == 2

    assert rewind_to(run, fallback, inspect_checkpoint(last).damage) == [3, 4]
    assert inspect_checkpoint(last).epochs == 2 and completed_epochs(run) == 2
    assert (run / DAMAGED_LAST).read_bytes() == damaged  # kept as it was, not a *.pt
    assert (run / "results.csv").read_text().splitlines()[1:] == ["1,1.000", "2,0.500"]
    assert (run / REWOUND_RESULTS).read_text().splitlines() == ["epoch,loss", "3,0.333", "4,0.250"]
    [rewind] = [e for e in EventTail(run / "events.jsonl").read_new() if e["event"] == "rewind"]
    assert rewind["to_epoch"] == 3 and rewind["epochs"] == [3, 4] and rewind["checkpoint"] == "weights/best.pt"
    assert "CRC" in rewind["reason"] or "Error" in rewind["reason"]
    assert trained_epochs(run / "events.jsonl") == [1, 2]  # 3 and 4 train again


def test_no_whole_checkpoint_rewinds_to_the_start(tmp_path):
    run = _run_dir(tmp_path, 2)
    (run / "weights" / "last.pt").write_bytes(b"PK\x03\x04 cut")
    assert fallback_checkpoint(run / "weights") is None
    assert rewind_to_start(run, "cut short") == [1, 2]
    assert not (run / "weights" / "last.pt").exists() and (run / DAMAGED_LAST).read_bytes() == b"PK\x03\x04 cut"
    assert completed_epochs(run) == 0 and trained_epochs(run / "events.jsonl") == []


def test_the_event_reader_skips_corrupted_lines_of_any_bytes(tmp_path):
    """A corrupted events.jsonl tail: bytes that are not UTF-8, a JSON value that is not a record."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b'{"event": "epoch", "epoch": 1}\n\xff\xfe\xc3(garbage\n[1, 2]\n\x00\x00{\n'
                     b'{"event": "epoch", "epoch": 2}\n')
    assert [e["epoch"] for e in EventTail(path).read_new()] == [1, 2]
    assert trained_epochs(path) == [1, 2]


def test_inspecting_imports_no_torch(tmp_path):
    path = write_checkpoint(tmp_path / "a.pt", 2)
    code = ("import sys; from orchestrator.rundir.checkpoints import inspect_checkpoint; "
            f"c = inspect_checkpoint({str(path)!r}); assert c.epochs == 2 and 'torch' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
