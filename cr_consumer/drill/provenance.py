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
A dead-letter record names its input in the runtime's own three headers
(``crkafka.source.topic``, ``.partition``, ``.offset``: ``runtime/pipeline/dead_letter.py``),
same encoding; :func:`read_dead_letter` reads those, by the same rules.
"""

from __future__ import annotations

from cr_consumer.kafka.client import Header
from cr_consumer.runtime.pipeline.dead_letter import HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC

TOPIC_HEADER = "crkafka.topic"
PARTITION_HEADER = "crkafka.partition"
OFFSET_HEADER = "crkafka.offset"
NAMES = (TOPIC_HEADER, PARTITION_HEADER, OFFSET_HEADER)
#: A dead-letter record's provenance headers (topic, partition, offset).
DEAD_LETTER_NAMES = (HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET)
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


def read_provenance(headers: tuple[Header, ...], names: tuple[str, str, str] = NAMES) -> tuple[str, int, int]:
    """(topic, partition, offset) from a record's headers named ``names`` (topic, partition,
    offset); ``ValueError`` names what is wrong."""
    topic_name, partition_name, offset_name = names
    found: dict[str, bytes] = {}
    for name, value in headers:
        if name not in names:
            continue
        if name in found:
            raise ValueError(f"header {name!r} appears twice")
        if value is None:
            raise ValueError(f"header {name!r} is null")
        found[name] = value
    absent = [name for name in names if name not in found]
    if absent:
        raise ValueError(f"no header {absent[0]!r}")
    try:
        topic = found[topic_name].decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"header {topic_name!r} is not UTF-8") from None
    if not topic:
        raise ValueError(f"header {topic_name!r} is empty")
    return topic, _number(found[partition_name], partition_name), _number(found[offset_name], offset_name)


def read_dead_letter(headers: tuple[Header, ...]) -> tuple[str, int, int]:
    """(topic, partition, offset) of a dead-letter record's input (:data:`DEAD_LETTER_NAMES`)."""
    return read_provenance(headers, DEAD_LETTER_NAMES)


__all__ = [
    "DEAD_LETTER_NAMES",
    "NAMES",
    "OFFSET_HEADER",
    "PARTITION_HEADER",
    "TOPIC_HEADER",
    "provenance_headers",
    "read_dead_letter",
    "read_provenance",
]
