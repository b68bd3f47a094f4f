"""Per-partition committed offset, end offset and lag of Kafka consumer groups, read from the broker.

Used by ``crkafka status`` for the groups the coordinator knows (a region's
name is its Kafka group). Every call is bounded by ``timeout_s``:

1. An admin client connects (an unreachable broker raises
   :class:`BrokerUnavailable` naming the bootstrap address, no traceback for
   the operator); each group's committed offsets are read with
   ``list_group_offsets`` (a group without commits has no rows).
2. A consumer without a group reads the end offsets of those partitions with
   ListOffsets ("latest").
3. ListOffsets is not trusted alone: some brokers (tansu) answer the base
   offset of the last record batch, not the end. The consumer therefore
   fetches from that offset and takes the fetch response's high watermark,
   which is right on every broker; the larger of the two is the end offset.
   A partition whose fetch does not answer within the deadline keeps the
   ListOffsets figure and is marked ``end_exact`` false.

Lag is ``end - committed`` (never below 0).
"""

from __future__ import annotations

import logging
import time

import attrs
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from coordinator.protocol.common.group_offsets import group_committed_offsets

log = logging.getLogger(__name__)

#: Bytes fetched per partition to learn its high watermark: the records are
#: discarded, so a small bound keeps a status call cheap on a large topic.
PROBE_FETCH_BYTES = 64 * 1024
#: How long the broker may hold an empty fetch: bounds each probe round.
PROBE_FETCH_WAIT_MS = 100


class BrokerUnavailable(Exception):
    """The Kafka broker did not answer within the timeout (the message names it)."""


@attrs.frozen
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int | None
    end: int | None
    end_exact: bool

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None:
            return None
        return max(0, self.end - self.committed)

    def to_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "topic": self.topic,
            "partition": self.partition,
            "committed": self.committed,
            "end": self.end,
            "lag": self.lag,
            "end_exact": self.end_exact,
        }


def read_lag(bootstrap: str, groups: list[str], timeout_s: float) -> list[PartitionLag]:
    """Committed/end/lag of every partition the ``groups`` have committed offsets for."""
    deadline = time.monotonic() + timeout_s
    timeout_ms = max(100, int(timeout_s * 1000))
    common = {
        "bootstrap_servers": bootstrap,
        "request_timeout_ms": timeout_ms + 1000,
        "bootstrap_timeout_ms": timeout_ms,
        "client_id": "crkafka-status",
    }
    try:
        admin = KafkaAdminClient(**common)
    except KafkaError as exc:
        raise BrokerUnavailable(f"the Kafka broker at {bootstrap} did not answer within {timeout_s:g}s") from exc
    committed: dict[tuple[str, TopicPartition], int] = {}
    try:
        for group in groups:
            for tp, offset in group_committed_offsets(admin, group).items():
                committed[(group, tp)] = offset
    except KafkaError as exc:
        raise BrokerUnavailable(f"the Kafka broker at {bootstrap} did not list the groups' offsets: {exc}") from exc
    finally:
        admin.close()
    tps = sorted({tp for _, tp in committed})
    ends, exact = _end_offsets(common, tps, deadline) if tps else ({}, set())
    return [
        PartitionLag(group, tp.topic, tp.partition, offset, ends.get(tp), tp in exact)
        for (group, tp), offset in sorted(committed.items())
    ]


def _end_offsets(
    common: dict[str, object], tps: list[TopicPartition], deadline: float
) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
    try:
        consumer = KafkaConsumer(
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=PROBE_FETCH_WAIT_MS,
            max_partition_fetch_bytes=PROBE_FETCH_BYTES,
            **common,
        )
    except KafkaError as exc:
        raise BrokerUnavailable(f"the Kafka broker at {common['bootstrap_servers']} did not answer") from exc
    try:
        remaining_ms = max(100, int((deadline - time.monotonic()) * 1000))
        try:
            ends = dict(consumer.end_offsets(tps, timeout_ms=remaining_ms))
        except KafkaError as exc:
            raise BrokerUnavailable(
                f"the Kafka broker at {common['bootstrap_servers']} did not answer the end offsets: {exc}"
            ) from exc
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, ends[tp])
        exact: set[TopicPartition] = set()
        while len(exact) < len(tps) and time.monotonic() < deadline:
            try:
                consumer.poll(timeout_ms=PROBE_FETCH_WAIT_MS * 2)
            except KafkaError as exc:
                log.warning("probing high watermarks failed (%s); end offsets from ListOffsets only", exc)
                break
            for tp in tps:
                high = consumer.highwater(tp)
                if high is not None:
                    ends[tp] = max(ends[tp], high)
                    exact.add(tp)
        return ends, exact
    finally:
        consumer.close()
