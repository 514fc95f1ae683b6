"""What a run's earlier attempts really wrote to W&B: the steps in their transaction logs.

wandb keeps each attempt's records in `wandb/[offline-]run-<time>-<id>/run-<id>.wandb` and writes them
there from a buffer (every 15 s, and at `finish`): an attempt killed mid-run (Ctrl-C, SIGKILL, a
Slurm preemption) loses what was still buffered, so the epochs its events.jsonl reports are not the
epochs W&B holds. A resumed run reads the files to continue its W&B run without a gap and without
logging a step twice (`wandb sync` uploads the folders of one id in order, as one run).

The file: a 7-byte header (':W&B', magic 0xBEE1, version), then LevelDB-style records (crc32 4
bytes, length 2, type 1) in 32 KiB blocks, each payload a `wandb_internal_pb2.Record`."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path) -> list[bytes]:
    """The records' payloads, in order; a torn tail (the writer was killed) ends the list."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        return []
    pos, out, pending = HEADER, [], b""
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # block trailer padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if len(chunk) < length:
            break
        if kind == 0 and length == 0:
            pos += BLOCK - pos % BLOCK if pos % BLOCK else 0
            continue
        if kind == FULL:
            out.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            out.append(pending + chunk)
            pending = b""
    return out


def records(path: Path) -> list:
    """The file's `Record`s as wandb wrote them (a record that does not parse ends the list)."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for raw in payloads(path):
        record = pb.Record()
        try:
            record.ParseFromString(raw)
        except DecodeError:
            break
        out.append(record)
    return out


def fields(items) -> dict:
    """A record's items (a history row, a config or summary update) as {key: value}."""
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def history_rows(path: Path) -> list[dict]:
    """Each `run.log` row the file holds, {key: value} with wandb's `_step`."""
    return [fields(record.history.item) for record in records(path) if record.WhichOneof("record_type") == "history"]


def attempt_files(wandb_dir: Path, wandb_id: str) -> list[Path]:
    """The transaction logs of every attempt of the W&B run `wandb_id`, oldest first: offline attempts'
    (`offline-run-<time>-<id>`) and online ones' (`run-<time>-<id>`) alike."""
    return sorted(Path(wandb_dir).glob(f"*run-*-{wandb_id}/run-{wandb_id}.wandb"),
                  key=lambda p: p.parent.name.split("run-", 1)[-1])


def last_logged_step(wandb_dir: Path, wandb_id: str) -> int:
    """The highest step any earlier attempt durably wrote; 0 when none did."""
    steps = [row.get("_step") for path in attempt_files(wandb_dir, wandb_id) for row in history_rows(path)]
    return max((s for s in steps if isinstance(s, int)), default=0)


def logged_epochs(wandb_dir: Path, wandb_id: str) -> list[int]:
    """The epochs the W&B run holds, in the order its attempts wrote them (each once, when a resumed run
    continued it as it should)."""
    return [row["epoch"] for path in attempt_files(wandb_dir, wandb_id) for row in history_rows(path) if "epoch" in row]
