"""What a drill produced: the manifest, written while producing from the
producer's own acknowledgements, and read back by the verifier
(:mod:`cr_consumer.drill.verify`).

Manifest (versioned JSON, ``manifest.json``)::

    {"version": 1, "group": "...",
     "topics": {"<topic>": {"<partition>": {"offsets": [o, ...], "values": [v, ...],
                                             "poison": [o, ...], "unplaced": [v, ...],
                                             "unplaced_poison": n}}}}

``offsets[i]`` was acknowledged for ``values[i]``; ``poison`` lists the offsets
of undecodable records, which the pipeline must count and skip. ``unplaced``
(optional) lists values acknowledged *without* an offset: kafka-python
acknowledges a batch it sent again after a request timeout (a broker paused
past it) and the broker already had, with offset -1. The verifier places
each such value where it was delivered; ``unplaced_poison`` counts poison
records acknowledged without an offset.

A manifest of another version, or with a malformed entry, is refused
(:class:`ManifestError`) before anything is verified.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import attrs

MANIFEST_VERSION = 1


class ManifestError(ValueError):
    """The manifest is missing, of another version, or inconsistent."""


@attrs.define
class Manifest:
    """What was produced (see the module docstring)."""

    group: str
    #: (topic, partition) -> {offset: value}
    values: dict[tuple[str, int], dict[int, Any]] = attrs.field(factory=dict)
    #: (topic, partition) -> set of poison offsets
    poison: dict[tuple[str, int], set[int]] = attrs.field(factory=dict)
    #: (topic, partition) -> values acknowledged without an offset (module docstring)
    unplaced: dict[tuple[str, int], list[Any]] = attrs.field(factory=dict)
    #: (topic, partition) -> poison records acknowledged without an offset
    unplaced_poison: dict[tuple[str, int], int] = attrs.field(factory=dict)

    def add(self, topic: str, partition: int, offset: int, value: Any, *, poison: bool = False) -> None:
        key = (topic, partition)
        if offset < 0:  # acknowledged without an offset (module docstring)
            self.values.setdefault(key, {})
            if poison:
                self.unplaced_poison[key] = self.unplaced_poison.get(key, 0) + 1
            else:
                self.unplaced.setdefault(key, []).append(value)
        elif poison:
            self.poison.setdefault(key, set()).add(offset)
            self.values.setdefault(key, {})
        else:
            self.values.setdefault(key, {})[offset] = value

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(set(self.values) | set(self.poison) | set(self.unplaced) | set(self.unplaced_poison))

    @property
    def produced(self) -> int:
        return (
            sum(len(v) for v in self.values.values()) + sum(len(v) for v in self.unplaced.values()) + self.poison_count
        )

    @property
    def poison_count(self) -> int:
        return sum(len(v) for v in self.poison.values()) + sum(self.unplaced_poison.values())

    def last_offsets(self) -> dict[tuple[str, int], int]:
        out = {}
        for key in self.partitions():
            offs = list(self.values.get(key, {})) + list(self.poison.get(key, ()))
            if offs:
                out[key] = max(offs)
        return out

    def to_json(self) -> dict[str, object]:
        topics: dict[str, dict[str, dict[str, object]]] = defaultdict(dict)
        for topic, part in self.partitions():
            vals = self.values.get((topic, part), {})
            offsets = sorted(vals)
            entry: dict[str, object] = {
                "offsets": offsets,
                "values": [vals[o] for o in offsets],
                "poison": sorted(self.poison.get((topic, part), ())),
            }
            if self.unplaced.get((topic, part)):
                entry["unplaced"] = list(self.unplaced[(topic, part)])
            if self.unplaced_poison.get((topic, part)):
                entry["unplaced_poison"] = self.unplaced_poison[(topic, part)]
            topics[topic][str(part)] = entry
        return {"version": MANIFEST_VERSION, "group": self.group, "topics": dict(topics)}

    @classmethod
    def from_json(cls, doc: Any) -> Manifest:  # decoded JSON, checked here
        if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
            raise ManifestError(
                f"manifest version {doc.get('version') if isinstance(doc, dict) else doc!r} "
                f"is not supported (expected {MANIFEST_VERSION})"
            )
        m = cls(group=doc.get("group", ""))
        for topic, parts in doc["topics"].items():
            for part_s, entry in parts.items():
                part = int(part_s)
                offsets, values = entry["offsets"], entry["values"]
                if len(offsets) != len(values):
                    raise ManifestError(f"manifest {topic}/{part}: {len(offsets)} offsets but {len(values)} values")
                m.values[(topic, part)] = dict(zip(offsets, values))
                if entry.get("poison"):
                    m.poison[(topic, part)] = set(entry["poison"])
                unplaced, unplaced_poison = entry.get("unplaced", []), entry.get("unplaced_poison", 0)
                if (
                    not isinstance(unplaced, list)
                    or not all(isinstance(v, str) for v in unplaced)
                    or type(unplaced_poison) is not int
                    or unplaced_poison < 0
                ):
                    raise ManifestError(f"manifest {topic}/{part}: malformed unplaced records")
                if unplaced:
                    m.unplaced[(topic, part)] = list(unplaced)
                if unplaced_poison:
                    m.unplaced_poison[(topic, part)] = unplaced_poison
        return m

    def save(self, path: str | os.PathLike[str]) -> None:
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Manifest:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ManifestError(f"manifest {path} does not exist") from None
        return cls.from_json(doc)


__all__ = ["MANIFEST_VERSION", "Manifest", "ManifestError"]
