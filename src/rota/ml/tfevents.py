"""Scalars from TensorBoard event files, read as they grow.

An event file is a sequence of TFRecords: an 8-byte little-endian length, a 4-byte CRC of
the length, the data (a serialised ``Event`` protobuf), a 4-byte CRC of the data. A record
still being written is left for the next read. Scalars are summaries with a
``simple_value``, or a one-number ``tensor`` (what ``torch.utils.tensorboard`` and
``tf.summary`` write). Decoding needs TensorBoard's protobufs (``pip install tensorboard``);
without them ``available()`` is False and nothing is read.
"""

from __future__ import annotations

import glob
import math
import os
import stat
import struct
from collections.abc import Iterator
from typing import Any

PATTERN = "events.out.tfevents.*"
_HEADER = 12  # length (8) + its CRC (4)
_FOOTER = 4
MAX_RECORD = 64 << 20  # a longer "record" is a corrupt file, not an event


def available() -> bool:
    try:
        from tensorboard.compat.proto import event_pb2  # noqa: F401
    except ImportError:
        return False
    return True


def event_files(directory: str) -> list[str]:
    """Every event file under ``directory`` (TensorBoard writes one per run, in subfolders)."""
    return sorted(glob.glob(os.path.join(glob.escape(directory), "**", PATTERN), recursive=True))


def read_scalars(path: str, offset: int,
                 limit: int = 4 << 20) -> tuple[list[tuple[str, int, float]], int]:
    """(tag, step, value) of the scalars in whole records from ``offset``; the new offset."""
    from tensorboard.compat.proto import event_pb2

    try:  # a fifo named like an event file must not block the reader
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return [], offset
            data = os.pread(fd, limit, offset)
        finally:
            os.close(fd)
    except OSError:
        return [], offset
    out: list[tuple[str, int, float]] = []
    pos = 0
    for end, payload in _records(data):
        pos = end
        event = event_pb2.Event()
        try:
            event.ParseFromString(payload)
        except Exception:  # a damaged record is skipped, not fatal
            continue
        if event.HasField("summary"):
            for v in event.summary.value:
                value = _scalar(v)
                if value is not None:
                    out.append((v.tag, int(event.step), value))
    return out, offset + pos


def _records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(end offset, payload) of each whole record in ``data``."""
    pos = 0
    while len(data) - pos >= _HEADER:
        (length,) = struct.unpack_from("<Q", data, pos)
        end = pos + _HEADER + length + _FOOTER
        if length > MAX_RECORD or end > len(data):
            return
        yield end, data[pos + _HEADER:pos + _HEADER + length]
        pos = end


def _scalar(v: Any) -> float | None:
    if v.HasField("simple_value"):
        x = float(v.simple_value)
    elif v.HasField("tensor") and len(v.tensor.float_val) == 1:
        x = float(v.tensor.float_val[0])
    elif v.HasField("tensor") and len(v.tensor.double_val) == 1:
        x = float(v.tensor.double_val[0])
    else:
        return None
    return x if math.isfinite(x) else None
