"""Read the records of an offline W&B run file (run-*.wandb) as wandb itself wrote them.

The file is wandb's transaction log: a 7-byte header (':W&B', magic 0xBEE1, version)
then LevelDB-style records (crc32 4 bytes, length 2, type 1) in 32 KiB blocks, each
payload a `wandb_internal_pb2.Record` protobuf."""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def payloads(path: Path) -> list[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, out, pending = HEADER, [], b""
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # block trailer padding
            pos += room
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
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


def read_run(path: Path) -> dict:
    """{'config': {...}, 'history': [{...}], 'summary': {...}, 'run': Record.run}"""
    from wandb.proto import wandb_internal_pb2 as pb

    config, history, summary, run = {}, [], {}, None
    for raw in payloads(path):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "run":
            run = rec.run
            for item in rec.run.config.update:
                config[item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in rec.config.update:
                config[item.key] = json.loads(item.value_json)
        elif kind == "history":
            row = {}
            for item in rec.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            history.append(row)
        elif kind == "summary":
            for item in rec.summary.update:
                key = item.key or "/".join(item.nested_key)
                summary[key] = json.loads(item.value_json)
    return {"config": config, "history": history, "summary": summary, "run": run}
