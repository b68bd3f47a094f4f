"""Record framing of the durable log: encode a record, scan a buffer of records.

Each record (all integers big-endian)::

    u32 length   number of bytes that follow the crc field (1 + len(payload))
    u32 crc32c   CRC-32C (Castagnoli) of those bytes: version byte + payload
    u8  version  payload format version (FORMAT_VERSION)
    ... payload  (JSON, see coordinator/records.py)

`scan` walks records until the end of the buffer or the first bad one (short
header, implausible length, short body, CRC mismatch, or a payload the caller's
callback rejects with ValueError) and reports that as `Damage`, counting the
well-formed records after it so the caller can tell a torn tail (none) from
corruption inside the log. A CRC-valid record with a newer version raises
`UnsupportedFormat`: that is not damage, and must not be truncated.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import attrs
import crc32c

FORMAT_VERSION = 1
HEADER = struct.Struct(">II")  # length, crc32c
HEADER_SIZE = HEADER.size
# A length above this is treated as corruption, not as a record to allocate:
# it prevents a garbage length field from making recovery read gigabytes.
MAX_RECORD_BYTES = 64 << 20


class LogError(Exception):
    """A problem with the state directory that needs an operator."""


class UnsupportedFormat(LogError):
    def __init__(self, path: Path, offset: int, version: int) -> None:
        super().__init__(
            f"{path}: record at byte {offset} has format version {version}, this coordinator "
            f"reads version {FORMAT_VERSION}; upgrade the coordinator (nothing was truncated)"
        )
        self.path, self.offset, self.version = path, offset, version


def encode_record(payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    body = bytes((version,)) + payload
    return HEADER.pack(len(body), crc32c.crc32c(body)) + body


@attrs.frozen
class Damage:
    """Why the valid log ends before the end of the file."""

    offset: int  # byte offset of the first bad record
    size: int  # bytes from `offset` to the end of the file
    reason: str
    valid_records_after: int  # well-formed records found after the bad one (0 = torn tail)


@attrs.define
class ScanResult:
    end: int = 0  # offset just after the last good record
    records: int = 0
    damage: Damage | None = None


def scan(
    buf: bytes | memoryview,
    on_record: Callable[[int, memoryview], None],
    *,
    path: Path = Path("<buffer>"),
) -> ScanResult:
    """Walk the records of `buf`, calling on_record(offset, payload) for each good one.

    `on_record` may raise ValueError to declare the payload undecodable, which
    ends the valid log at that record like a bad CRC does.
    """
    view = memoryview(buf)
    total = len(view)
    pos = 0
    result = ScanResult()
    unpack = HEADER.unpack_from
    crc = crc32c.crc32c
    while pos < total:
        reason = None
        if total - pos < HEADER_SIZE:
            reason = f"short header ({total - pos} of {HEADER_SIZE} bytes)"
        else:
            length, want = unpack(view, pos)
            if length < 1 or length > MAX_RECORD_BYTES:
                reason = f"implausible length {length}"
            elif total - pos - HEADER_SIZE < length:
                reason = f"short record ({total - pos - HEADER_SIZE} of {length} bytes)"
            else:
                body = view[pos + HEADER_SIZE : pos + HEADER_SIZE + length]
                if crc(body) != want:
                    reason = "CRC mismatch"
                elif body[0] != FORMAT_VERSION:
                    raise UnsupportedFormat(path, pos, body[0])
                else:
                    try:
                        on_record(pos, body[1:])
                    except ValueError as exc:
                        reason = f"undecodable payload ({exc})"
        if reason is not None:
            result.damage = Damage(pos, total - pos, reason, _count_valid_after(view, pos))
            break
        pos += HEADER_SIZE + length
        result.records += 1
    result.end = pos
    return result


def _count_valid_after(view: memoryview, bad: int) -> int:
    """Valid records that follow the bad one, if its length field can be trusted."""
    total = len(view)
    if total - bad < HEADER_SIZE:
        return 0
    length, _ = HEADER.unpack_from(view, bad)
    if length < 1 or length > MAX_RECORD_BYTES:
        return 0
    pos, count = bad + HEADER_SIZE + length, 0
    while total - pos >= HEADER_SIZE:
        length, want = HEADER.unpack_from(view, pos)
        if length < 1 or length > MAX_RECORD_BYTES or total - pos - HEADER_SIZE < length:
            break
        if crc32c.crc32c(view[pos + HEADER_SIZE : pos + HEADER_SIZE + length]) != want:
            break
        count += 1
        pos += HEADER_SIZE + length
    return count
