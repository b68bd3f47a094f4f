"""Where a ``crkafka`` query starts and where a batch read ends: the offset options.

* ``startingOffsets``: ``earliest``, ``latest``, ``committed`` (crkafka's) or JSON
  per partition ``{"topic":{"0":23,"1":-2}}`` (-2 earliest, -1 latest);
* ``startingTimestamp`` (every partition) or ``startingOffsetsByTimestamp``
  (JSON per partition): the first offset at or after the time;
* ``endingOffsets`` (batch reads): ``latest`` or JSON per partition (-1 latest).

At most one of the starting options may be given; :func:`starting` and
:func:`ending` take the lower-cased option map and return the typed spec (a
starting option is a :class:`~cr_consumer.kafka.start_position.StartPosition`,
the operator's type too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from cr_consumer.kafka.start_position import EARLIEST_OFFSET, LATEST_OFFSET, PartitionValues, StartKind, StartPosition
from cr_consumer.spark.options.values import SPELLING, TOPIC_RE, InvalidOptionError, parse_time


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
            raise InvalidOptionError(
                option, f"topic {topic!r}: expected a valid topic name and an object of partitions"
            )
        for part, value in parts.items():
            if not str(part).isdigit() or isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidOptionError(
                    option, f"{topic}:{part} = {value!r}: expected a partition number and an integer >= {minimum}"
                )
            out[(topic, int(part))] = value
    return tuple(sorted(out.items()))


def starting(opts: Mapping[str, str]) -> StartPosition | None:
    """The starting options (None: none given)."""
    given = [n for n in ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp") if n in opts]
    if len(given) > 1:
        raise InvalidOptionError(SPELLING[given[1]], f"give only one of {', '.join(SPELLING[n] for n in given)}")
    if "startingtimestamp" in opts:
        return StartPosition(
            StartKind.TIMESTAMP, timestamp_ms=parse_time("startingTimestamp", opts["startingtimestamp"])
        )
    if "startingoffsetsbytimestamp" in opts:
        return StartPosition(
            StartKind.TIMESTAMP,
            values=json_map("startingOffsetsByTimestamp", opts["startingoffsetsbytimestamp"], minimum=0),
        )
    if "startingoffsets" not in opts:
        return None
    raw = opts["startingoffsets"].strip()
    kinds = {k.value: k for k in (StartKind.EARLIEST, StartKind.LATEST, StartKind.COMMITTED)}
    if raw.lower() in kinds:
        return StartPosition(kinds[raw.lower()])
    if not raw.startswith("{"):
        raise InvalidOptionError(
            "startingOffsets", f"expected earliest, latest, committed or JSON per partition, got {raw!r}"
        )
    return StartPosition(StartKind.SPECIFIC, values=json_map("startingOffsets", raw, minimum=EARLIEST_OFFSET))


def ending(opts: Mapping[str, str]) -> PartitionValues:
    """``endingOffsets``: ((topic, partition), offset or -1) pairs; empty: latest everywhere."""
    raw = opts.get("endingoffsets", "latest").strip()
    if raw.lower() == "latest":
        return ()
    if not raw.startswith("{"):
        raise InvalidOptionError("endingOffsets", f"expected latest or JSON per partition, got {raw!r}")
    return json_map("endingOffsets", raw, minimum=LATEST_OFFSET)
