"""What a ``crkafka`` query reads: ``subscribe``, ``subscribePattern`` or ``assign`` (exactly one).

* ``subscribe``: a comma-separated list of topic names, none twice;
* ``subscribePattern``: a regular expression the group subscribes to;
* ``assign``: JSON ``{"topic":[0,1]}``, fixed partitions without a group
  assignment (the group takes the commits only).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from cr_consumer.spark.options.values import TOPIC_RE, InvalidOptionError

#: (topics, pattern, assigned partitions): one of them is given, the others empty.
Subscription = tuple[tuple[str, ...], str | None, tuple[tuple[str, int], ...]]


def subscription(opts: Mapping[str, str]) -> Subscription:
    """The subscription of the lower-cased option map ``opts``."""
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) != 1:
        raise InvalidOptionError("subscribe", "exactly one of subscribe, subscribePattern and assign must be given")
    if "subscribe" in opts:
        return _subscribe(opts["subscribe"]), None, ()
    if "subscribepattern" in opts:
        return (), _subscribe_pattern(opts["subscribepattern"]), ()
    return (), None, _assign(opts["assign"])


def _subscribe(value: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in value.split(",") if t.strip())
    if not topics:
        raise InvalidOptionError("subscribe", "names no topic")
    for topic in topics:
        if not TOPIC_RE.fullmatch(topic):
            raise InvalidOptionError("subscribe", f"{topic!r} is not a valid Kafka topic name")
    if len(set(topics)) != len(topics):
        raise InvalidOptionError("subscribe", f"lists a topic twice: {value!r}")
    return topics


def _subscribe_pattern(pattern: str) -> str:
    if not pattern:
        raise InvalidOptionError("subscribePattern", "is empty")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidOptionError("subscribePattern", f"is not a valid regular expression: {exc}") from None
    return pattern


def _assign(value: str) -> tuple[tuple[str, int], ...]:
    try:
        doc = json.loads(value)
    except ValueError as exc:
        raise InvalidOptionError("assign", f'expected JSON like {{"topic":[0,1]}}: {exc}') from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError("assign", 'expected a non-empty JSON object like {"topic":[0,1]}')
    tps = set()
    for topic, parts in doc.items():
        if not TOPIC_RE.fullmatch(str(topic)) or not isinstance(parts, list) or not parts:
            raise InvalidOptionError("assign", f"topic {topic!r}: expected a valid topic name and a list of partitions")
        for part in parts:
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise InvalidOptionError("assign", f"{topic}: partition {part!r} is not a partition number")
            tps.add((topic, part))
    return tuple(sorted(tps))
