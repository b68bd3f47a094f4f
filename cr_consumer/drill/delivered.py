"""What a drill's sinks published, read by input offset, before any check.

The verifier (``verify.py``) compares the manifest with a :class:`Delivered`: every published
copy of a record under the input (topic, partition) and offset it stands for, with its value
and key. Two readers fill one:

* file sinks (this module): every ``*.jsonl`` file of the sink's directory
  (:func:`published_files`: pending files never end in ``.jsonl``; a subdirectory is another
  sink's, e.g. the dead-letter sink's). Each line of the output names its input topic,
  partition and offset (:func:`read_files`); each line of the dead-letter output names it in its
  ``crkafka.source.*`` headers (:func:`read_dead_letter_files`, ``provenance.read_dead_letter``);
* Kafka sinks: ``verify_kafka.read_topic``, the committed records of every partition of the
  topic, decided from the log's own markers (it also counts aborted records and open
  transactions into the :class:`Delivered`).

A published record that does not name its input (a line that is not a JSON object with its
input's topic, partition and offset, or whose headers are of no known form) is counted as
*malformed* and named in the examples, never guessed. The same offset delivered twice with two
different values or keys keeps a :class:`Conflict` in place of the value or key.
"""

from __future__ import annotations

import base64
import json
import os
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from cr_consumer.drill.provenance import read_dead_letter
from cr_consumer.kafka.client import Header
from cr_consumer.runtime.pipeline.records import BASE64_MARKER

PUBLISHED_SUFFIX = ".jsonl"
#: Examples of each problem kept in the result, so a failure names offsets
#: without a report of megabytes.
MAX_EXAMPLES = 10

_Key = tuple[str, int]


class Conflict:
    """Marker: the same offset was delivered with two different values."""

    def __repr__(self) -> str:
        return "<conflicting values>"


@attrs.define
class Delivered:
    """What a sink published, by input (topic, partition) (module docstring)."""

    #: How often each input offset was delivered.
    seen: defaultdict[_Key, Counter[int]] = attrs.field(factory=lambda: defaultdict(Counter))
    #: The value delivered at each input offset (a :class:`Conflict` when two copies differ).
    values: defaultdict[_Key, dict[int, Any]] = attrs.field(factory=lambda: defaultdict(dict))
    #: The key delivered at each input offset, likewise (the keyed-state check).
    keys: defaultdict[_Key, dict[int, Any]] = attrs.field(factory=lambda: defaultdict(dict))
    #: Published records that do not name their input.
    malformed: int = 0
    #: Files or output partitions read.
    sources: int = 0
    aborted: int = 0
    open_transactions: int = 0
    #: Examples of the reading's own problems (malformed lines, open transactions).
    examples: dict[str, list[object]] = attrs.field(factory=dict)

    def add(self, topic: str, partition: int, offset: int, value: Any, key: Any = None) -> None:
        """One delivered copy of input ``topic``/``partition``@``offset`` (its value and key)."""
        where = (topic, partition)
        self.seen[where][offset] += 1
        for delivered, got in ((self.values[where], value), (self.keys[where], key)):
            if offset not in delivered:
                delivered[offset] = got
            elif delivered[offset] != got:
                delivered[offset] = Conflict()

    def example(self, kind: str, item: object) -> None:
        kept = self.examples.setdefault(kind, [])
        if len(kept) < MAX_EXAMPLES:
            kept.append(item)


def published_files(output_dir: str | os.PathLike[str]) -> list[Path]:
    """Every published output file in ``output_dir`` (the file sink writes them there; a
    subdirectory is another sink's, e.g. the dead-letter sink's)."""
    return sorted(p for p in Path(output_dir).glob(f"*{PUBLISHED_SUFFIX}") if not p.name.startswith("."))


def count_lines(paths: list[Path]) -> int:
    n = 0
    for p in paths:
        with open(p, "rb") as f:
            n += sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    return n


#: One output line decoded: the input (topic, partition, offset) it stands for; raises
#: ValueError, KeyError, TypeError or AttributeError for a line it cannot place.
_Place = Callable[[dict[str, Any]], tuple[str, int, int]]


def _read_lines(directory: str | os.PathLike[str], place: _Place) -> Delivered:
    """Every published file in ``directory``, line by line, each under the input ``place`` names."""
    out = Delivered()
    for path in published_files(directory):
        out.sources += 1
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                try:
                    doc = json.loads(line)
                    topic, partition, offset = place(doc)
                except (json.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
                    out.malformed += 1
                    out.example("malformed_lines", f"{path.parent.name}/{path.name}:{lineno}: {exc}")
                    continue
                out.add(topic, partition, offset, doc.get("value"), doc.get("key"))
    return out


def _provenance(doc: dict[str, Any]) -> tuple[str, int, int]:
    return doc["topic"], int(doc["partition"]), int(doc["offset"])


def read_files(output_dir: str | os.PathLike[str]) -> Delivered:
    """The file sink's output: every published file under ``output_dir``, line by line."""
    return _read_lines(output_dir, _provenance)


def _header(name: object, value: object) -> Header:
    """A header of a file sink line (``records.py``: a UTF-8 string, the base64 marker object
    or null); ValueError for anything else."""
    if not isinstance(name, str):
        raise ValueError(f"header name {name!r} is not a string")
    if value is None:
        return name, None
    if isinstance(value, str):
        return name, value.encode("utf-8")
    if isinstance(value, dict) and set(value) == {BASE64_MARKER} and isinstance(value[BASE64_MARKER], str):
        return name, base64.b64decode(value[BASE64_MARKER], validate=True)
    raise ValueError(f"header {name!r} has a value of no known form: {value!r:.80}")


def _dead_letter_place(doc: dict[str, Any]) -> tuple[str, int, int]:
    return read_dead_letter(tuple(_header(name, value) for name, value in doc.get("headers") or ()))


def read_dead_letter_files(directory: str | os.PathLike[str]) -> Delivered:
    """The file dead-letter sink's output: every published file in ``directory``, each line
    under the input its ``crkafka.source.*`` headers name (``provenance.read_dead_letter``)."""
    return _read_lines(directory, _dead_letter_place)


__all__ = [
    "MAX_EXAMPLES",
    "PUBLISHED_SUFFIX",
    "Conflict",
    "Delivered",
    "count_lines",
    "published_files",
    "read_dead_letter_files",
    "read_files",
]
