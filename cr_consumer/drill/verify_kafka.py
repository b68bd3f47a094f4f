"""Reading a drill's Kafka output for the verifier, trusting nothing the broker filters.

The Kafka sink writes each member's checkpoint interval in one transaction, committed when the
checkpoint completes and aborted when the region resets past it (the protocol:
``coordinator/protocol/region/transactions.py``). A ``read_committed`` consumer cannot check
that: the test broker sends no aborted-transactions list, so both clients return aborted records
(``coordinator/kafka/committed_filter.py``). :func:`read_topic` therefore decides from the log:

1. It opens one raw client (``settings`` from ``admin.admin_settings``; every request bounded by
   its request timeout, the whole read by ``deadline_s``) and takes the output topic's partitions
   from the cluster's metadata: every partition is read, whichever the sink wrote to.
2. Each partition is read from offset 0 to its high watermark at the read
   (``raw_batches.read_committed_with``: raw batches and their control markers). Records of
   committed transactions and non-transactional records are delivered; records of aborted
   transactions are dropped; records with no marker yet, and every later record of the
   partition, are held back, as the last stable offset holds a ``read_committed`` consumer.
3. Each delivered record names its input in its provenance headers
   (:mod:`cr_consumer.drill.provenance`); its value, decoded as UTF-8 (the drill's values are
   text; other bytes stay bytes and then differ from the manifest's value), is added to the
   :class:`~cr_consumer.drill.delivered.Delivered` under that input offset. A record without valid
   provenance is *malformed*. The dead-letter topic is read the same way, with the dead-letter
   records' own provenance headers (``provenance=read_dead_letter``).
4. Aborted records are counted, not failed: a reset aborts the interval it replays. A
   transaction still open below the high watermark fails the drill (*open_transactions*): at the
   end every interval must be committed or aborted, and an open one also hides its records and
   every later record of its partition (they are *missing* too). Each is named in the examples:
   output topic and partition, producer id and epoch, first offset, records (a malformed
   record: output topic, partition, offset and what is wrong).

:func:`verify` of ``verify.py`` then runs the same checks as on the file sink's output, so the
report and the plot do not depend on the sink. :class:`KafkaOutputCounter` gives the drill's
watch loop the count of delivered records while the region runs, and :func:`write_log_layout`
the output's batches as stored, for the post-mortem of a drill that failed (one line per batch:
partition, offsets, producer id and epoch, marker, the input offsets its first and last record
name).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coordinator.kafka.committed_filter import LogRecord
from coordinator.kafka.raw_batches import PartitionReader, partition_leaders, read_committed_with
from coordinator.kafka.raw_requests import RawClient
from cr_consumer.drill.delivered import Delivered
from cr_consumer.drill.provenance import read_provenance
from cr_consumer.kafka.client import Header

#: Bound on the whole read of the output topic (step 1): a broker that stops answering fails
#: the verification instead of hanging the drill.
READ_DEADLINE_S = 120.0
#: Bound on one count of the watch loop (:class:`KafkaOutputCounter`).
COUNT_DEADLINE_S = 30.0
#: The watch loop counts at most this often: a count opens a client and fetches every partition,
#: load the busy test machine should not carry ten times a second.
COUNT_PERIOD_S = 0.5


def _value(raw: bytes | None) -> str | bytes | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


#: Reads a record's input (topic, partition, offset) from its headers; ValueError if it cannot.
Provenance = Callable[[tuple[Header, ...]], tuple[str, int, int]]


def _deliver(out: Delivered, where: tuple[str, int], record: LogRecord, provenance: Provenance) -> None:
    """Step 3 for one record of output partition ``where``."""
    try:
        topic, part, offset = provenance(record.headers)
    except ValueError as exc:
        out.malformed += 1
        out.example("malformed_lines", [*where, record.offset, str(exc)])
        return
    out.add(topic, part, offset, _value(record.value), _value(record.key))


def read_topic(
    settings: Mapping[str, Any],
    topic: str,
    *,
    deadline_s: float = READ_DEADLINE_S,
    provenance: Provenance = read_provenance,
) -> Delivered:
    """Steps 1-4: the committed output of every partition of ``topic``."""
    out = Delivered()
    with RawClient(settings, time.monotonic() + deadline_s) as client:
        for partition in sorted(partition_leaders(client, topic)):
            read = read_committed_with(client, topic, partition)
            out.sources += 1
            out.aborted += read.aborted_records
            for record in read.records:
                _deliver(out, (topic, partition), record, provenance)
            for txn in read.open_transactions:
                out.open_transactions += 1
                out.example(
                    "open_transactions",
                    [topic, partition, txn.producer_id, txn.producer_epoch, txn.first_offset, txn.records],
                )
    return out


def write_log_layout(
    settings: Mapping[str, Any], topic: str, path: Path, *, deadline_s: float = READ_DEADLINE_S
) -> None:
    """Every batch of ``topic`` as stored, one line each, into ``path`` (see the module docstring)."""

    def named(record: LogRecord) -> str:
        try:
            _, part, offset = read_provenance(record.headers)
        except ValueError:
            return "?"
        return f"{part}@{offset}"

    with RawClient(settings, time.monotonic() + deadline_s) as client, path.open("w") as out:
        for partition in sorted(partition_leaders(client, topic)):
            for b in PartitionReader(client, topic, partition).batches(0, None):
                what = b.control.name if b.control is not None else ("txn" if b.transactional else "plain")
                inputs = f" in {named(b.records[0])}..{named(b.records[-1])}" if b.records else ""
                out.write(
                    f"{topic}[{partition}] {b.base_offset}-{b.last_offset} pid {b.producer_id} "
                    f"epoch {b.producer_epoch} {what}{inputs}\n"
                )


class KafkaOutputCounter:
    """The watch loop's count of delivered output records (the file sink's: ``OutputCounter``).

    Incremental: each partition is read again from its last stable offset of the previous count
    (the first record of its oldest open transaction, else where the read stopped). Everything
    before that offset was decided and counted once; nothing at or after it was delivered yet,
    so a fresh read from there sees every later marker with its records. At most one count per
    :data:`COUNT_PERIOD_S`; between two, the last count is returned.

    One raw client and one reader per partition (its leader looked up once) serve every count,
    each count bounded by :data:`COUNT_DEADLINE_S`; a count that fails closes them, and the next
    opens new ones. :meth:`close` when the watch ends.
    """

    def __init__(self, settings: Mapping[str, Any], topic: str, *, period_s: float = COUNT_PERIOD_S) -> None:
        self.settings = settings
        self.topic = topic
        self.period_s = period_s
        self._resume: dict[int, int] = {}
        self._counted = 0
        self._next_count = 0.0
        self._client: RawClient | None = None
        self._readers: dict[int, PartitionReader] = {}

    def count(self) -> int:
        now = time.monotonic()
        if now < self._next_count:
            return self._counted
        self._next_count = now + self.period_s
        try:
            readers = self._open(now + COUNT_DEADLINE_S)
            for partition, reader in readers.items():
                read = reader.read(self._resume.get(partition, 0), None)
                self._counted += len(read.records)
                self._resume[partition] = min((t.first_offset for t in read.open_transactions), default=read.stop)
        except BaseException:
            self.close()
            raise
        return self._counted

    def _open(self, deadline: float) -> dict[int, PartitionReader]:
        if self._client is None:
            client = self._client = RawClient(self.settings, deadline)
            self._readers = {
                p: PartitionReader(client, self.topic, p) for p in sorted(partition_leaders(client, self.topic))
            }
        self._client.deadline = deadline
        return self._readers

    def close(self) -> None:
        """Close the raw client (the next count opens another)."""
        client, self._client = self._client, None
        self._readers = {}
        if client is not None:
            client.close()


__all__ = ["COUNT_PERIOD_S", "READ_DEADLINE_S", "KafkaOutputCounter", "read_topic", "write_log_layout"]
