"""A clock the harness can step from outside the process: the system clock plus an offset.

The offset lives in a 16-byte file the harness writes and each worker maps: the offset in ms
(signed 64-bit) and its bitwise complement, so a reader never takes a half-written value for a
step — it reads again until the two agree. The worker hands :class:`OffsetClock` to jobledger as
its injected clock (``App(clock=...)``, which passes it on to the store); nothing patches
``time``.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

import jobledger

_LAYOUT = struct.Struct("<qq")


def write_offset(path: Path, offset_ms: int) -> None:
    """Set the offset every clock mapping ``path`` reads from now on (creating the file)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if os.fstat(fd).st_size < _LAYOUT.size:
            os.ftruncate(fd, _LAYOUT.size)
        with mmap.mmap(fd, _LAYOUT.size) as mapped:
            # Complement first, offset last: a reader between the two sees them disagree.
            mapped[8:16] = struct.pack("<q", ~offset_ms)
            mapped[0:8] = struct.pack("<q", offset_ms)
    finally:
        os.close(fd)


class OffsetClock:
    """Epoch ms: :func:`jobledger.system_clock` plus the offset in ``path`` when called."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._map = mmap.mmap(fd, _LAYOUT.size, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def offset_ms(self) -> int:
        while True:
            offset, check = _LAYOUT.unpack_from(self._map)
            if check == ~offset:
                return int(offset)

    def __call__(self) -> int:
        return jobledger.system_clock() + self.offset_ms()
