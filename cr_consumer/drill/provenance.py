"""Where a drill's Kafka output record came from: three headers the drill pipeline writes and
the Kafka verifier reads.

The Kafka sink writes each record's key, value and headers as they are, so the provenance
travels in headers and the value stays the input's value, byte for byte (the verifier compares
it with the manifest):

* ``crkafka.topic``: the input topic, UTF-8;
* ``crkafka.partition``, ``crkafka.offset``: the input partition and offset, ASCII decimal.

:func:`provenance_headers` makes them (the drill pipeline, ``pipeline.py``);
:func:`read_provenance` reads them back and refuses a record without exactly one valid header of
each name (``ValueError``): the verifier counts such a record as malformed, never guesses.
"""

from __future__ import annotations

from cr_consumer.kafka.client import Header

TOPIC_HEADER = "crkafka.topic"
PARTITION_HEADER = "crkafka.partition"
OFFSET_HEADER = "crkafka.offset"
NAMES = (TOPIC_HEADER, PARTITION_HEADER, OFFSET_HEADER)
#: Digits a partition or offset header may have: an int64 has at most 19; a longer header is
#: refused before it is parsed.
MAX_DIGITS = 19


def provenance_headers(topic: str, partition: int, offset: int) -> tuple[Header, ...]:
    """The three headers of a record read from ``topic``/``partition`` at ``offset``."""
    return (
        (TOPIC_HEADER, topic.encode("utf-8")),
        (PARTITION_HEADER, str(int(partition)).encode("ascii")),
        (OFFSET_HEADER, str(int(offset)).encode("ascii")),
    )


def _number(raw: bytes, name: str) -> int:
    if not (0 < len(raw) <= MAX_DIGITS and raw.isdigit()):
        raise ValueError(f"header {name!r} is not a decimal number: {raw[:40]!r}")
    return int(raw)


def read_provenance(headers: tuple[Header, ...]) -> tuple[str, int, int]:
    """(topic, partition, offset) from a record's headers; ``ValueError`` names what is wrong."""
    found: dict[str, bytes] = {}
    for name, value in headers:
        if name not in NAMES:
            continue
        if name in found:
            raise ValueError(f"header {name!r} appears twice")
        if value is None:
            raise ValueError(f"header {name!r} is null")
        found[name] = value
    absent = [name for name in NAMES if name not in found]
    if absent:
        raise ValueError(f"no header {absent[0]!r}")
    try:
        topic = found[TOPIC_HEADER].decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"header {TOPIC_HEADER!r} is not UTF-8") from None
    if not topic:
        raise ValueError(f"header {TOPIC_HEADER!r} is empty")
    return topic, _number(found[PARTITION_HEADER], PARTITION_HEADER), _number(found[OFFSET_HEADER], OFFSET_HEADER)


__all__ = ["NAMES", "OFFSET_HEADER", "PARTITION_HEADER", "TOPIC_HEADER", "provenance_headers", "read_provenance"]
