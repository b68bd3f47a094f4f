"""Record framing of the durable log: encode a record, scan a buffer of records.

Each record (all integers big-endian)::

    u32 length   number of bytes that follow the crc field (1 + len(payload))
    u32 crc32c   CRC-32C (Castagnoli) of those bytes: version byte + payload
    u8  version  payload format version (FORMAT_VERSION, see coordinator/store/records.py)
    ... payload  (JSON, see coordinator/store/records.py)

Writing: `encode_record` refuses (raises `RecordTooLarge`, writes nothing) a
record whose body would exceed MAX_RECORD_BYTES, so no writer can produce a
record that a reader would take for garbage.

Reading: `scan` walks records until the end of the buffer or the first bad one
and reports that one as `Damage`. What recovery does with it depends on its
`kind` (the rule is in docs/durable-state.md, "Torn tail or corruption"):

1. A record is good when its header is complete, its length is at least 1,
   its body lies inside the buffer and its CRC matches.
2. A good record with a version newer than this code reads raises
   `UnsupportedFormat`: not damage, nothing may be truncated.
3. A good record that is not one this code writes (a version below
   FORMAT_VERSION, a body over MAX_RECORD_BYTES) or whose payload the caller
   rejects (`on_record` raises ValueError) is `DamageKind.UNDECODABLE`: the
   CRC proves it was written like that, so it is never a torn write.
4. Otherwise the bad record (short header, zero length, body past the end,
   CRC mismatch) is searched past: if any good record starts anywhere after
   its first byte (`find_valid_frame`), the damage is `DamageKind.CORRUPT`
   (damage inside the log). If nothing good follows it, it is
   `DamageKind.TORN`: the incomplete end of an append interrupted by a crash.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Callable
from pathlib import Path

import attrs
import crc32c

#: The payload version written, and the only one read.
FORMAT_VERSION = 2
HEADER = struct.Struct(">II")  # length, crc32c
HEADER_SIZE = HEADER.size
#: Largest record body (version byte + payload) a writer may produce. A larger
#: length field that does not frame a CRC-valid body inside the file is
#: garbage: the bound keeps a damaged length from being taken for a record.
MAX_RECORD_BYTES = 64 << 20
#: Largest payload: the body minus its version byte.
MAX_PAYLOAD_BYTES = MAX_RECORD_BYTES - 1

# Where a record may start when searching past a damaged one: a version byte
# (a raw control character, which the JSON encoder never writes inside a
# payload: it escapes them) followed by the '{' that opens every payload.
_FRAME_START = re.compile(rb"[\x01-\x1f]\{")


class LogError(Exception):
    """A problem with the state directory that needs an operator."""


class RecordTooLarge(ValueError):
    """A writer asked for a record over MAX_RECORD_BYTES; nothing was written."""


class UnsupportedFormat(LogError):
    def __init__(self, path: Path, offset: int, version: int) -> None:
        super().__init__(
            f"{path}: record at byte {offset} has format version {version}, this coordinator "
            f"reads version {FORMAT_VERSION}; upgrade the coordinator (nothing was truncated)"
        )
        self.path, self.offset, self.version = path, offset, version


def encode_record(payload: bytes, version: int = FORMAT_VERSION) -> bytes:
    """Frame `payload`; raises RecordTooLarge (nothing framed) over MAX_RECORD_BYTES."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise RecordTooLarge(
            f"log record of {len(payload)} payload bytes exceeds the {MAX_RECORD_BYTES}-byte frame limit; "
            "nothing was written"
        )
    body = bytes((version,)) + payload
    return HEADER.pack(len(body), crc32c.crc32c(body)) + body


class DamageKind(str, enum.Enum):
    TORN = "torn"  # nothing good after it: the end of an interrupted append
    CORRUPT = "corrupt"  # a good record follows: damage inside the log
    UNDECODABLE = "undecodable"  # CRC-valid but the payload is not a record


@attrs.frozen
class Damage:
    """Why the valid log ends before the end of the file."""

    offset: int  # byte offset of the first bad record
    size: int  # bytes from `offset` to the end of the file
    reason: str
    kind: DamageKind
    next_valid: int | None  # offset of the first good record after it (None = none)
    valid_records_after: int  # good records in a row from next_valid

    def describe(self, path: Path) -> str:
        where = f"{path} at byte {self.offset}"
        if self.kind is DamageKind.UNDECODABLE:
            return f"{where}: a CRC-valid record that is not a valid record payload ({self.reason})"
        if self.kind is DamageKind.CORRUPT:
            return (
                f"{where}: bad record ({self.reason}) followed by a valid record at byte {self.next_valid} "
                f"({self.valid_records_after} valid records in a row from there)"
            )
        return f"{where}: torn tail ({self.reason}), {self.size} bytes"


@attrs.define
class ScanResult:
    end: int = 0  # offset just after the last good record
    records: int = 0
    damage: Damage | None = None


def _frame_at(view: memoryview, pos: int) -> int | None:
    """The length of the good record at `pos` (rule 1), or None."""
    total = len(view)
    if total - pos < HEADER_SIZE + 1:
        return None
    length: int
    want: int
    length, want = HEADER.unpack_from(view, pos)
    if length < 1 or total - pos - HEADER_SIZE < length:
        return None
    if crc32c.crc32c(view[pos + HEADER_SIZE : pos + HEADER_SIZE + length]) != want:
        return None
    return length


def unframe(buf: bytes | memoryview) -> tuple[int, memoryview]:
    """(version, payload) of a buffer that holds exactly one record, by rule 1 and the
    frame limit (a log that stores one record per message, the Kafka log, uses it).
    Raises ValueError naming the problem: short header, zero length, a length that
    does not match the buffer, a body over MAX_RECORD_BYTES, a CRC mismatch. The
    caller decides what a version other than FORMAT_VERSION means."""
    view = memoryview(buf)
    if len(view) < HEADER_SIZE + 1:
        raise ValueError(f"short record ({len(view)} bytes, a record has at least {HEADER_SIZE + 1})")
    length, want = HEADER.unpack_from(view, 0)
    if length < 1:
        raise ValueError("zero length")
    if length != len(view) - HEADER_SIZE:
        raise ValueError(f"length field {length} does not match the {len(view) - HEADER_SIZE} bytes after the header")
    if length > MAX_RECORD_BYTES:
        raise ValueError(f"a record of {length} bytes, over the {MAX_RECORD_BYTES}-byte frame limit")
    body = view[HEADER_SIZE:]
    if crc32c.crc32c(body) != want:
        raise ValueError("CRC mismatch")
    return body[0], body[1:]


def find_valid_frame(view: memoryview, after: int) -> int | None:
    """Offset of the first good record starting after byte `after` (rule 4), or None."""
    for m in _FRAME_START.finditer(view, after + 1 + HEADER_SIZE):
        pos = m.start() - HEADER_SIZE
        if _frame_at(view, pos) is not None:
            return pos
    return None


def _count_run(view: memoryview, pos: int) -> int:
    count = 0
    while (length := _frame_at(view, pos)) is not None:
        count += 1
        pos += HEADER_SIZE + length
    return count


def scan(
    buf: bytes | memoryview,
    on_record: Callable[[int, memoryview], None],
    *,
    path: Path = Path("<buffer>"),
) -> ScanResult:
    """Walk the records of `buf`, calling on_record(offset, payload) for each good one.

    `on_record` may raise ValueError to declare the payload undecodable, which
    ends the valid log at that record (rule 3).
    """
    view = memoryview(buf)
    total = len(view)
    pos = 0
    result = ScanResult()
    unpack = HEADER.unpack_from
    crc = crc32c.crc32c
    while pos < total:
        reason = None
        kind = DamageKind.TORN
        if total - pos < HEADER_SIZE:
            reason = f"short header ({total - pos} of {HEADER_SIZE} bytes)"
        else:
            length, want = unpack(view, pos)
            if length < 1:
                reason = "zero length"
            elif total - pos - HEADER_SIZE < length:
                reason = f"short record ({total - pos - HEADER_SIZE} of {length} bytes)"
            else:
                body = view[pos + HEADER_SIZE : pos + HEADER_SIZE + length]
                if crc(body) != want:
                    reason = "CRC mismatch"
                elif body[0] > FORMAT_VERSION:
                    raise UnsupportedFormat(path, pos, body[0])
                elif body[0] != FORMAT_VERSION:
                    reason = f"format version {body[0]} (this coordinator reads version {FORMAT_VERSION})"
                    kind = DamageKind.UNDECODABLE
                elif length > MAX_RECORD_BYTES:
                    reason = f"a record of {length} bytes, over the {MAX_RECORD_BYTES}-byte frame limit"
                    kind = DamageKind.UNDECODABLE
                else:
                    try:
                        on_record(pos, body[1:])
                    except ValueError as exc:
                        reason, kind = f"undecodable payload ({exc})", DamageKind.UNDECODABLE
        if reason is not None:
            next_valid = find_valid_frame(view, pos)
            if kind is DamageKind.TORN and next_valid is not None:
                kind = DamageKind.CORRUPT
            run = _count_run(view, next_valid) if next_valid is not None else 0
            result.damage = Damage(pos, total - pos, reason, kind, next_valid, run)
            break
        pos += HEADER_SIZE + length
        result.records += 1
    result.end = pos
    return result
