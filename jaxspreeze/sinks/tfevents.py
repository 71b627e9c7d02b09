"""TensorBoard's event file, scalars only, written without TensorFlow or tensorboardX.

An event file (``events.out.tfevents.<time>.<host>...``) is a sequence of TFRecords, each
``uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the
data`` (little-endian), whose data is one serialized ``tensorflow.Event`` protobuf. The
sink needs three kinds of event, so they are encoded here by hand (the fields and wire
types of ``event.proto`` and ``summary.proto``):

- the file's first: ``Event{wall_time=1 (double), file_version=3 (string "brain.Event:2")}``;
- a session start (a resumed run's purge step: TensorBoard hides the events an earlier
  session wrote at or past it): ``Event{wall_time, step=2 (int64), session_log=7
  {status=1 (enum START = 1)}}``;
- scalars: ``Event{wall_time, step, summary=5 {value=1 (repeated) {tag=1 (string),
  simple_value=2 (float32)}}}``, as tensorboardX's ``add_scalar`` writes them.

tensorboardX costs about 1.8 s of CPU to import (protobuf and its generated classes); this
module costs nothing. tests/test_sinks.py reads what it writes with tensorboardX's own
protobuf classes and checks every CRC.
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
        table.append(c)
    return tuple(table)


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``: ``crc32c(b"123456789") == 0xE3069283``."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord."""
    length = struct.pack("<Q", len(data))
    return (
        length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))
    )


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # an int64 as protobuf encodes it (two's complement)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _event(wall_time: float, step: int | None, *fields: bytes) -> bytes:
    head = _key(1, 1) + struct.pack("<d", wall_time)
    if step is not None:
        head += _key(2, 0) + _varint(step)
    return head + b"".join(fields)


def version_event(wall_time: float) -> bytes:
    """The file's first event: its format version."""
    return _event(wall_time, None, _bytes(3, b"brain.Event:2"))


def start_event(wall_time: float, step: int) -> bytes:
    """A session start at ``step`` (TensorBoard drops the earlier events at or past it)."""
    return _event(wall_time, step, _bytes(7, _key(1, 0) + _varint(1)))


def scalars_event(wall_time: float, step: int, values: Iterable[tuple[str, float]]) -> bytes:
    """One event holding ``(tag, value)`` scalars at ``step`` (values as float32)."""
    summary = b"".join(
        _bytes(1, _bytes(1, tag.encode()) + _key(2, 5) + _f32(float(value)))
        for tag, value in values
    )
    return _event(wall_time, step, _bytes(5, summary))


def _f32(value: float) -> bytes:
    """``value`` as protobuf's float holds it (out of float32's range: an infinity)."""
    try:
        return struct.pack("<f", value)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, value))


class EventFile:
    """One event file under ``logdir``, appended to, flushed at most every ``flush_s``
    seconds and on :meth:`close`. ``purge_step``: a session start written first."""

    def __init__(self, logdir: str | Path, purge_step: int | None = None, flush_s: float = 10.0):
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        name = f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}"
        self.path = self.logdir / name
        n = 0
        while self.path.exists():  # two files in one second from one process
            n += 1
            self.path = self.logdir / f"{name}.{n}"
        self._file: BinaryIO = self.path.open("wb")
        self._flush_s = flush_s
        self._flushed = time.monotonic()
        self._write(version_event(now))
        if purge_step is not None:
            self._write(start_event(now, purge_step))

    def _write(self, event: bytes) -> None:
        self._file.write(record(event))

    def add_scalars(self, step: int, values: Iterable[tuple[str, float]]) -> None:
        """Write the scalars of one step (one event)."""
        values = list(values)
        if values:
            self._write(scalars_event(time.time(), step, values))
        if time.monotonic() - self._flushed >= self._flush_s:
            self.flush()

    def flush(self) -> None:
        """Hand what is written to the OS (TensorBoard sees it)."""
        self._file.flush()
        self._flushed = time.monotonic()

    def close(self) -> None:
        """Flush and close the file."""
        if not self._file.closed:
            self._file.close()
