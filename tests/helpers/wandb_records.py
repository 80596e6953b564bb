"""Read the history rows of a W&B offline run file (`run-*.wandb`) to check what was logged.

The file is a LevelDB-style log (a 7-byte W&B header, 32 KiB blocks, records split into
FULL/FIRST/MIDDLE/LAST fragments with a 7-byte fragment header) of wandb Record protobufs.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK, HEADER, FILE_HEADER = 32768, 7, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out, pending, offset = [], b"", FILE_HEADER
    while offset + HEADER <= len(data):
        left_in_block = BLOCK - offset % BLOCK
        if left_in_block < HEADER:  # block trailer padding
            offset += left_in_block
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + HEADER])
        fragment = data[offset + HEADER : offset + HEADER + length]
        offset += HEADER + length
        if kind == FULL:
            out.append(fragment)
        elif kind == FIRST:
            pending = fragment
        elif kind == MIDDLE:
            pending += fragment
        elif kind == LAST:
            out.append(pending + fragment)
        else:  # zero padding at the end of a block
            offset += BLOCK - offset % BLOCK if offset % BLOCK else 0
    return out


def history(path: Path) -> list[dict]:
    """The logged history rows, as {key: value}."""
    rows = []
    for raw in records(path):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows
