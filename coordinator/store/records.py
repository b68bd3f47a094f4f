"""Payload of one durable-log record: versioned JSON, never pickle.

The frame's version byte (`coordinator.store.log.frame`) is the payload version:
2, the only one written and read.

Payload (UTF-8 JSON object)::

    {"ts": 1732240000.5,               # wall-clock time of the write (informational)
     "e": [ENTRY, ...],                # keyed entries, applied in order
     "act": {"group-a": 1732240000.5}} # optional: last-activity time of groups (retention)

    ENTRY is one of
      ["c", group, topic, [partition, ...], [offset | null, ...]]
            control variables (group, topic, partition) -> initial offset;
            null = tombstone. One "c" entry counts as len(partitions) keyed entries.
      ["r", group, region_index | null]
            the group's registry entry (its consistent-region index);
            null = tombstone of the group and of all its members
      ["m", group, member, 1 | null]
            member registered in the group (key: group + member, as in the
            offsets topic); null = tombstone. The group's "r" comes first.
      ["d", namespace, key, {...} | null]
            a small JSON document of another service; null = tombstone

One record carries every entry written by one request, so a request's entries
are replayed all or nothing (one request, one atomic commit). Records
written in bulk (compaction, expiry, activity) are packed by `Batcher`, which
bounds every record by bytes (BATCH_BYTES) and by entries (BATCH_ENTRIES).

Unknown fields of the payload object are ignored (forward-compatible additions);
an unknown entry kind makes the record undecodable. A new entry kind needs a
new version byte, so that a coordinator that does not know it stops with
"upgrade the coordinator" instead of taking it for damage.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coordinator.store.log.frame import MAX_PAYLOAD_BYTES, RecordTooLarge

CONTROL = "c"
REGISTRY = "r"
MEMBER = "m"
DOCUMENT = "d"

#: Payload bytes of one batched record at most. Far below the frame limit, so
#: that an entry that fits a record alone always fits, and so that replay and
#: the compaction thread handle records of bounded size (~1 MiB: a few ms of
#: JSON decoding each).
BATCH_BYTES = 1 << 20
#: Keyed entries per batched record at most (seed: batched records make a
#: 1,000,000-entry replay take well under 2 s).
BATCH_ENTRIES = 10_000

# The C scanner behind json.loads, without its per-call wrapper (replay speed).
_scan_once = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode

#: One keyed entry, as written and as `decode` returns it after `_check_entry`:
#: a JSON array whose shape depends on its kind (ENTRY in the module
#: docstring); its items are JSON values, so Any.
Entry = list[Any]


def control_entry(group: str, topic: str, partitions: Sequence[int], offsets: Sequence[int | None]) -> Entry:
    return [CONTROL, group, topic, list(partitions), list(offsets)]


def registry_entry(group: str, region_index: int | None) -> Entry:
    return [REGISTRY, group, region_index]


def member_entry(group: str, member: str, present: bool) -> Entry:
    return [MEMBER, group, member, 1 if present else None]


def document_entry(namespace: str, key: str, value: Mapping[str, Any] | None) -> Entry:
    return [DOCUMENT, namespace, key, value]


def entry_count(entry: Entry) -> int:
    """Keyed entries an entry stands for (dead-entry accounting)."""
    return len(entry[3]) if entry[0] == CONTROL else 1


def encode_entry(entry: Entry) -> bytes:
    return _dumps(entry).encode("utf-8")


def encode_activity(group: str, at: float) -> bytes:
    return f"{_dumps(group)}:{_dumps(at)}".encode()


def assemble(ts: float, entries: Sequence[bytes], act: Sequence[bytes] = ()) -> bytes:
    """The payload of pre-encoded entries (`encode_entry`) and activity items
    (`encode_activity`); same bytes as encoding the whole object at once."""
    out = b'{"ts":' + _dumps(ts).encode() + b',"e":[' + b",".join(entries) + b"]"
    if act:
        out += b',"act":{' + b",".join(act) + b"}"
    return out + b"}"


def encode(ts: float, entries: list[Entry], act: Mapping[str, float] | None = None) -> bytes:
    return assemble(ts, [encode_entry(e) for e in entries], [encode_activity(g, t) for g, t in (act or {}).items()])


def _overhead(ts: float) -> int:
    """Bytes of a payload besides its entries and activity items (upper bound)."""
    return len(assemble(ts, [], [b""])) + 8


class Batcher:
    """Packs entries and activity items into records bounded by bytes and entries.

    `emit(payload, entries, count)` is called for every record, in order, with
    the entries it holds and their keyed-entry count; `flush()` emits the last
    one. An entry too large for a batch is emitted alone if it fits the frame;
    a control entry that does not is split by partitions; anything else raises
    RecordTooLarge before it is emitted.
    """

    def __init__(
        self,
        ts: float,
        emit: Callable[[bytes, list[Entry], int], None],
        *,
        max_bytes: int = BATCH_BYTES,
        max_entries: int = BATCH_ENTRIES,
    ) -> None:
        self.ts = ts
        self._emit = emit
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self._overhead = _overhead(ts)
        self._parts: list[bytes] = []
        self._entries: list[Entry] = []
        self._act: list[bytes] = []
        self._bytes = self._overhead
        self._count = 0
        self.records = 0
        self.largest = 0  # payload bytes of the largest record emitted

    def add(self, entry: Entry) -> None:
        part = encode_entry(entry)
        count = entry_count(entry)
        size = len(part) + 1
        if self._overhead + size > self.max_bytes or count > self.max_entries:
            self._add_oversize(entry, part, count)
            return
        if self._bytes + size > self.max_bytes or self._count + count > self.max_entries:
            self.flush()
        self._parts.append(part)
        self._entries.append(entry)
        self._bytes += size
        self._count += count

    def add_activity(self, group: str, at: float) -> None:
        part = encode_activity(group, at)
        size = len(part) + 1
        if self._overhead + size > MAX_PAYLOAD_BYTES:
            raise RecordTooLarge(f"activity of group {group[:80]!r}... does not fit a log record")
        if self._bytes + size > self.max_bytes:
            self.flush()
        self._act.append(part)
        self._bytes += size

    def _add_oversize(self, entry: Entry, part: bytes, count: int) -> None:
        if entry[0] == CONTROL and len(entry[3]) > 1:
            half = len(entry[3]) // 2
            _, group, topic, partitions, offsets = entry
            self.add(control_entry(group, topic, partitions[:half], offsets[:half]))
            self.add(control_entry(group, topic, partitions[half:], offsets[half:]))
            return
        if self._overhead + len(part) > MAX_PAYLOAD_BYTES:
            raise RecordTooLarge(f"one {entry[0]!r} entry of {len(part)} bytes does not fit a log record")
        self.flush()
        self._parts, self._entries, self._count = [part], [entry], count
        self._bytes += len(part) + 1
        self.flush()

    def flush(self) -> None:
        if not self._parts and not self._act:
            return
        payload = assemble(self.ts, self._parts, self._act)
        entries, count = self._entries, self._count
        self._parts, self._entries, self._act = [], [], []
        self._bytes, self._count = self._overhead, 0
        self.records += 1
        self.largest = max(self.largest, len(payload))
        self._emit(payload, entries, count)


def decode(payload: bytes | memoryview) -> tuple[float, dict[str, float], list[Entry]]:
    """(ts, act, entries); raises ValueError naming the problem if the payload is malformed."""
    try:
        text = str(payload, "utf-8")
        body, end = _scan_once(text, 0)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    except StopIteration:
        raise ValueError("not JSON: no value at offset 0") from None
    if end != len(text):
        raise ValueError(f"not JSON: extra data at offset {end}")
    if not isinstance(body, dict):
        raise ValueError("payload is not a JSON object")
    entries = body.get("e")
    act = body.get("act") or {}
    ts = body.get("ts", 0.0)
    if not isinstance(entries, list) or not isinstance(act, dict) or not isinstance(ts, (int, float)):
        raise ValueError("payload lacks a valid 'e' list, 'act' object or 'ts' number")
    for entry in entries:
        _check_entry(entry)
    return float(ts), act, entries


def _check_entry(entry: Any) -> None:
    if not isinstance(entry, list) or not entry:
        raise ValueError(f"entry is not a non-empty list: {entry!r:.80}")
    kind = entry[0]
    if kind == CONTROL:
        ok = (
            len(entry) == 5
            and isinstance(entry[1], str)
            and isinstance(entry[2], str)
            and isinstance(entry[3], list)
            and isinstance(entry[4], list)
            and len(entry[3]) == len(entry[4])
        )
    elif kind == REGISTRY:
        ok = len(entry) == 3 and isinstance(entry[1], str) and (entry[2] is None or type(entry[2]) is int)
    elif kind == MEMBER:
        ok = len(entry) == 4 and isinstance(entry[1], str) and isinstance(entry[2], str) and entry[3] in (1, None)
    elif kind == DOCUMENT:
        ok = (
            len(entry) == 4
            and isinstance(entry[1], str)
            and isinstance(entry[2], str)
            and (entry[3] is None or isinstance(entry[3], dict))
        )
    else:
        raise ValueError(f"unknown entry kind {kind!r}")
    if not ok:
        raise ValueError(f"malformed {kind!r} entry: {entry!r:.120}")
