"""End offsets (high watermarks) of partitions, read in the driver without reading the data.

Spark's planner needs, per partition, the offset after the last record. A
real Kafka answers ListOffsets "latest" with it; tansu answers the base offset
of the last record batch, which is short by the rest of that batch. The high
watermark in a fetch response is right on both. :class:`WatermarkProbe`:

1. One group-less kafka-python client of the seam
   (:class:`~cr_consumer.kafka.client.KafkaClient`: no commits,
   ``auto.offset.reset=none``) assigned the partitions asked about.
2. ``end_offsets`` (ListOffsets "latest") for all of them, then every
   partition is positioned one record before that answer
   (``max(answer - 1, 0)``), so the next fetch returns at least the record at
   that offset: the last batch on tansu, one record's batch on Kafka
   (``max.partition.fetch.bytes=1``: a broker returns one whole batch at most).
   Partitions are never paused: kafka-python's pause/resume loses a partition
   paused with buffered records.
3. ``poll`` until every partition whose answer was > 0 has returned records
   (a fresh fetch response: its high watermark is current), bounded by
   :data:`PROBE_TIMEOUT_S`; a partition answered 0 is empty on Kafka, or holds
   one batch at offset 0 on tansu: it gets one fetch round to show it. A
   fetch answers in milliseconds; when some partitions have none after
   :data:`PROBE_RESTART_S`, the client's fetch state is taken as stuck (seen
   under load after the query's assignment changed: no response for 30 s
   while a fresh client answered at once), so the probe closes its client and
   asks the waiting partitions again with a new one, within the same bound.
4. The end of each partition is the client's ``highwater`` after that fetch
   (never below the ListOffsets answer). The fetched records are dropped:
   at most one batch per partition per trigger passes through the driver.
5. While a partition's ListOffsets answer is the same as at its last probe,
   no record batch was appended to it (on Kafka and on tansu alike): its
   last high watermark is reused without a fetch (idle partitions cost one
   ListOffsets request per trigger).

The probe is used on the source runner's main thread only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from cr_consumer.kafka.client import ClientKind, KafkaClient, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.spark.client_properties import groupless_properties
from cr_consumer.spark.options import SourceOptions

log = logging.getLogger(__name__)

#: Bound on one probe of all partitions: an unreachable broker fails the
#: trigger instead of hanging the query's planning.
PROBE_TIMEOUT_S = 30.0
#: How long a probe waits for a fetch answer before it starts its client afresh
#: (step 3): well above a fetch's round trip under load, well below the bound.
PROBE_RESTART_S = 5.0
#: One poll's wait inside a probe.
PROBE_POLL_MS = 50
#: Bound on each ListOffsets request.
LOOKUP_TIMEOUT_MS = 15_000
#: Records per poll of a probe (at most one batch per partition is fetched).
PROBE_MAX_RECORDS = 500
#: Bound on closing the probe's client.
CLOSE_TIMEOUT_MS = 5_000


class WatermarkTimeout(TimeoutError):
    """The end offsets of some partitions could not be read in time."""


def probe_properties(options: SourceOptions) -> dict[str, object]:
    """The probe fetches one byte per partition, at once: enough to learn the high watermark."""
    props = groupless_properties(options, "crkafka-probe")
    props.update({"max.partition.fetch.bytes": 1, "fetch.max.wait.ms": 10})
    return props


class WatermarkProbe:
    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._consumer: KafkaClient | None = None
        self.records_dropped = 0  # records fetched only for their response's watermark
        #: partition -> (ListOffsets answer, high watermark) of the last probe: while the
        #: answer is unchanged no batch was appended, so the watermark still holds
        self._known: dict[TopicPartition, tuple[int, int]] = {}

    def _client(self) -> KafkaClient:
        if self._consumer is None:
            self._consumer = make_client(ClientKind.KAFKA_PYTHON, probe_properties(self._options))
        return self._consumer

    def partitions(self) -> dict[str, set[int]]:
        """Every topic the cluster metadata lists now, with its partitions."""
        return self._client().topics(LOOKUP_TIMEOUT_MS)

    def beginning(self, tps: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        return self._client().beginning_offsets(sorted(tps), LOOKUP_TIMEOUT_MS)

    def offsets_for_time(self, tps: Collection[TopicPartition], time_ms: int) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is >= ``time_ms`` (None: no such record)."""
        if not tps:
            return {}
        found = self._client().offsets_for_times({tp: time_ms for tp in tps}, LOOKUP_TIMEOUT_MS)
        return {tp: found.get(tp) for tp in tps}

    def ends(self, tps: Collection[TopicPartition], *, timeout_s: float = PROBE_TIMEOUT_S) -> dict[TopicPartition, int]:
        """The end offset (high watermark) of every partition in ``tps``."""
        tps = sorted(tps)
        if not tps:
            return {}
        consumer = self._client()
        listed = consumer.end_offsets(tps, LOOKUP_TIMEOUT_MS)
        known = {tp: self._known[tp][1] for tp in tps if tp in self._known and self._known[tp][0] == listed[tp]}
        tps = [tp for tp in tps if tp not in known]
        if not tps:
            return known
        waiting = {tp for tp in tps if listed[tp] > 0}
        fresh: dict[TopicPartition, int | None] = {}
        deadline = time.monotonic() + timeout_s
        consumer = self._start_fetch(tps, listed)
        restart_at = time.monotonic() + PROBE_RESTART_S
        rounds = 0
        while waiting or rounds == 0:
            now = time.monotonic()
            if now > deadline:
                raise WatermarkTimeout(f"no fetch response within {timeout_s}s for {sorted(map(str, waiting))}")
            if waiting and now > restart_at:
                log.warning(
                    "crkafka: no fetch answer within %.0fs for %s; probing them with a new client",
                    PROBE_RESTART_S,
                    sorted(map(str, waiting)),
                )
                self.close()
                consumer = self._start_fetch(sorted(waiting), listed)
                restart_at = now + PROBE_RESTART_S
            fetched = consumer.poll(PROBE_POLL_MS, PROBE_MAX_RECORDS)
            rounds += 1
            for tp, records in fetched.items():
                self.records_dropped += len(records)
                fresh[tp] = consumer.highwater(tp)
                waiting.discard(tp)
        ends = {tp: max(listed[tp], fresh.get(tp) or 0) for tp in tps}
        self._known.update({tp: (listed[tp], end) for tp, end in ends.items() if tp in fresh or listed[tp] == 0})
        return {**known, **ends}

    def _start_fetch(self, tps: list[TopicPartition], listed: dict[TopicPartition, int]) -> KafkaClient:
        """Step 2's positioning: assign ``tps``, each one record before its ListOffsets answer."""
        consumer = self._client()
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, max(listed[tp] - 1, 0))
        return consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close(CLOSE_TIMEOUT_MS)
            self._consumer = None


__all__ = ["WatermarkProbe", "WatermarkTimeout", "probe_properties"]
