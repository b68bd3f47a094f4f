"""Where a ``crkafka`` query starts and where a batch read ends: the offset options.

* ``startingOffsets``: ``earliest``, ``latest``, ``committed`` (crkafka's) or JSON
  per partition ``{"topic":{"0":23,"1":-2}}`` (-2 earliest, -1 latest);
* ``startingTimestamp`` (every partition) or ``startingOffsetsByTimestamp``
  (JSON per partition): the first offset at or after the time;
* ``endingOffsets`` (batch reads): ``latest`` or JSON per partition (-1 latest).

At most one of the starting options may be given; :func:`starting` and
:func:`ending` take the lower-cased option map and return the typed spec.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping

import attrs

from cr_consumer.spark.options.names import SPELLING
from cr_consumer.spark.options.values import TOPIC_RE, InvalidOptionError, parse_time


class StartKind(enum.Enum):
    """Where a partition starts the first time the query sees it (``startingOffsets`` ...)."""

    EARLIEST = "earliest"
    LATEST = "latest"
    #: crkafka's addition: the group's committed offset; a partition without one starts at earliest.
    COMMITTED = "committed"
    #: JSON per partition: an offset, -2 (earliest) or -1 (latest); partitions not listed start at latest.
    SPECIFIC = "specific"
    #: ``startingTimestamp`` / ``startingOffsetsByTimestamp``: the first offset at or after the
    #: timestamp; a partition with no record that late starts at latest.
    TIMESTAMP = "timestamp"


#: In a JSON offset map: the partition's earliest / latest offset (Spark's values).
EARLIEST_OFFSET = -2
LATEST_OFFSET = -1

PartitionValues = tuple[tuple[tuple[str, int], int], ...]


@attrs.frozen
class StartingOffsets:
    kind: StartKind = StartKind.LATEST
    #: SPECIFIC: ((topic, partition), offset) pairs; TIMESTAMP: ((topic, partition), epoch ms)
    #: pairs, or empty with ``timestamp_ms`` for every partition.
    values: PartitionValues = ()
    timestamp_ms: int | None = None

    def value_of(self, topic: str, partition: int) -> int | None:
        return dict(self.values).get((topic, partition), self.timestamp_ms)


def json_map(option: str, raw: str, *, minimum: int) -> PartitionValues:
    """``{"topic": {"0": value, ...}, ...}`` as sorted ((topic, partition), value) pairs."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidOptionError(option, f'expected JSON like {{"topic":{{"0":23}}}}: {exc}') from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError(option, 'expected a non-empty JSON object like {"topic":{"0":23}}')
    out = {}
    for topic, parts in doc.items():
        if not TOPIC_RE.fullmatch(str(topic)) or not isinstance(parts, dict) or not parts:
            raise InvalidOptionError(option, f"topic {topic!r}: expected a valid topic name and an object of partitions")
        for part, value in parts.items():
            if not str(part).isdigit() or isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidOptionError(option, f"{topic}:{part} = {value!r}: expected a partition number and an "
                                                 f"integer >= {minimum}")
            out[(topic, int(part))] = value
    return tuple(sorted(out.items()))


def starting(opts: Mapping[str, str]) -> StartingOffsets | None:
    """The starting options (None: none given)."""
    given = [n for n in ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp") if n in opts]
    if len(given) > 1:
        raise InvalidOptionError(SPELLING[given[1]], f"give only one of {', '.join(SPELLING[n] for n in given)}")
    if "startingtimestamp" in opts:
        return StartingOffsets(StartKind.TIMESTAMP, timestamp_ms=parse_time("startingTimestamp", opts["startingtimestamp"]))
    if "startingoffsetsbytimestamp" in opts:
        return StartingOffsets(StartKind.TIMESTAMP, values=json_map("startingOffsetsByTimestamp",
                                                                    opts["startingoffsetsbytimestamp"], minimum=0))
    if "startingoffsets" not in opts:
        return None
    raw = opts["startingoffsets"].strip()
    kinds = {k.value: k for k in (StartKind.EARLIEST, StartKind.LATEST, StartKind.COMMITTED)}
    if raw.lower() in kinds:
        return StartingOffsets(kinds[raw.lower()])
    if not raw.startswith("{"):
        raise InvalidOptionError("startingOffsets", f"expected earliest, latest, committed or JSON per partition, "
                                                    f"got {raw!r}")
    return StartingOffsets(StartKind.SPECIFIC, values=json_map("startingOffsets", raw, minimum=EARLIEST_OFFSET))


def ending(opts: Mapping[str, str]) -> PartitionValues:
    """``endingOffsets``: ((topic, partition), offset or -1) pairs; empty: latest everywhere."""
    raw = opts.get("endingoffsets", "latest").strip()
    if raw.lower() == "latest":
        return ()
    if not raw.startswith("{"):
        raise InvalidOptionError("endingOffsets", f"expected latest or JSON per partition, got {raw!r}")
    return json_map("endingOffsets", raw, minimum=LATEST_OFFSET)
