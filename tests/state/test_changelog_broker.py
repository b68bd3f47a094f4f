"""The changelog topic's creation against the real broker (``kafka_python/changelog.py``)."""

from __future__ import annotations

import pytest

from cr_consumer.kafka.kafka_python.changelog import ensure_changelog
from cr_consumer.state.changelog import changelog_topic
from cr_consumer.testing.kafka_util import create_topic, unique_name

pytestmark = pytest.mark.timeout(120)


def test_ensure_changelog_creates_the_topic_with_the_input_s_partitions(bootstrap: str) -> None:
    name = changelog_topic(unique_name("g"), "agg", "input")
    made = ensure_changelog(bootstrap, name, 2)
    assert made.created
    assert made.partitions == 2
    assert made.replication_factor is not None
    assert 1 <= made.replication_factor <= 3
    assert made.min_insync_replicas == min(2, made.replication_factor)
    again = ensure_changelog(bootstrap, name, 2)
    assert (again.created, again.partitions) == (False, 2)


def test_ensure_changelog_keeps_an_existing_topic_and_refuses_another_partition_count(bootstrap: str) -> None:
    name = create_topic(bootstrap, changelog_topic(unique_name("g"), "agg", "input"), partitions=3)
    found = ensure_changelog(bootstrap, name, 3)
    assert (found.created, found.partitions, found.replication_factor) == (False, 3, None)
    with pytest.raises(ValueError, match=rf"changelog {name} has 3 partitions, but its input has 2"):
        ensure_changelog(bootstrap, name, 2)
