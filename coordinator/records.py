"""Payload of one durable-log record (format version 1): versioned JSON, never pickle.

One record carries every entry written by one request, so a request's entries
are replayed all or nothing (the transactional commit of seed 002). The record
frame (length, CRC32C, version byte) is `coordinator.durable_log`'s business.

Payload (UTF-8 JSON object)::

    {"ts": 1732240000.5,               # wall-clock time of the write (informational)
     "act": {"group-a": 1732240000.5}, # optional: last-activity time of groups (retention)
     "e": [ENTRY, ...]}                # keyed entries, applied in order

    ENTRY is one of
      ["c", group, topic, [partition, ...], [offset | null, ...]]
            control variables (group, topic, partition) -> initial offset;
            null = tombstone. One "c" entry counts as len(partitions) keyed entries.
      ["g", group, {"region_index": int, "members": [name, ...]} | null]
            the group's registry entry (whole value); null = tombstone
      ["d", namespace, key, {...} | null]
            a small JSON document of another service; null = tombstone

Unknown fields of the payload object are ignored (forward-compatible additions);
an unknown entry kind makes the record undecodable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CONTROL = "c"
GROUP = "g"
DOCUMENT = "d"

# The C scanner behind json.loads, without its per-call wrapper (replay speed).
_scan_once = json.JSONDecoder().scan_once
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def control_entry(group: str, topic: str, partitions: Sequence[int], offsets: Sequence[int | None]) -> list:
    return [CONTROL, group, topic, list(partitions), list(offsets)]


def group_entry(group: str, region_index: int, members: Iterable[str]) -> list:
    return [GROUP, group, {"region_index": region_index, "members": sorted(members)}]


def group_tombstone(group: str) -> list:
    return [GROUP, group, None]


def document_entry(namespace: str, key: str, value: Mapping[str, Any] | None) -> list:
    return [DOCUMENT, namespace, key, value]


def entry_count(entry: list) -> int:
    """Keyed entries an entry stands for (dead-entry accounting)."""
    return len(entry[3]) if entry[0] == CONTROL else 1


def encode(ts: float, entries: list[list], act: Mapping[str, float] | None = None) -> bytes:
    body: dict[str, Any] = {"ts": ts, "e": entries}
    if act:
        body["act"] = act
    return _dumps(body).encode("utf-8")


def decode(payload: bytes | memoryview) -> tuple[float, dict[str, float], list[list]]:
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
    elif kind == GROUP:
        value = entry[2] if len(entry) == 3 else 0
        ok = isinstance(entry[1], str) and (
            value is None
            or (
                isinstance(value, dict)
                and isinstance(value.get("region_index"), int)
                and isinstance(value.get("members"), list)
            )
        )
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
