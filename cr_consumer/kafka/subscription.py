"""The arguments of :meth:`~cr_consumer.kafka.client.KafkaClient.subscribe`, checked
the same way by both clients before either library sees them.

A subscription is a sequence of topic names or a pattern, exactly one: both at
once, or neither, would leave which topics the member consumes to the library's
own rule. A single string as ``topics`` is refused (a library would read it as
its characters, one topic each).
"""

from __future__ import annotations

from collections.abc import Sequence


def check_subscription(topics: Sequence[str], pattern: str | None) -> None:
    """ValueError unless ``topics`` (non-empty strings) or ``pattern`` (non-empty) is given, exactly one."""
    if isinstance(topics, str):
        raise ValueError(f"subscribe: topics must be a sequence of topic names, not the string {topics!r}")
    if bool(topics) == bool(pattern):
        raise ValueError("subscribe: give topics or a pattern (exactly one)")
    for topic in topics:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"subscribe: a topic name must be a non-empty string, got {topic!r}")


__all__ = ["check_subscription"]
