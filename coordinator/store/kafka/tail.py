"""Reading the log topic as the broker decided it: committed transactions only.

Every write of the log is a transaction of the log's transactional id
(`producer.LogWriter`), so the topic holds, besides committed records, the records of
transactions a fenced leader left open or that were aborted (the test broker shows
them to ``read_committed`` consumers too). `LogTail` reads the partition's raw
batches, control markers included (``coordinator.kafka.raw_batches.PartitionReader``),
through a ``coordinator.kafka.committed_filter.CommittedFilter``, so only records of
committed transactions reach the store:

1. Each fetch from `position` gives the batches there, without a hole
   (``raw_batches.stored_run``: a batch the broker has not stored yet is waited for;
   records deleted under the log fail the fetch), and the high watermark. Each batch's
   records go through the filter; every record the filter releases
   (its transaction's COMMIT marker read) is handed on in offset order: a lease
   record (key `LEASE_KEY`, the leader's sign of life, naming its endpoint and
   epoch) is counted and handed to ``on_lease(value)``, any other to
   ``on_value(offset, value)``. An aborted transaction's records are dropped; an
   open one's are held.
2. `read_to_end()` fetches until `position` reaches the high watermark of its first
   fetch. A transaction still open there raises `LogError`: it is called after this
   process fenced the transactional id, which aborted the only writer's open
   transaction, so an open one is a foreign writer's, and committed records behind it
   could not be released.
3. `follow(lease_s, stop)` (a standby) repeats step 1, pausing `TAIL_POLL_S` whenever
   it is at the high watermark, until no new batch arrived for ``lease_s`` (the leader
   stopped writing: it writes a lease record every ``lease_s / 3`` when idle), and
   returns; or until `stop` is set, which raises `StandbyStopped`.

Each fetch is bounded by ``call_timeout_s`` (the raw client's request timeout and
deadline); a broker that does not answer raises instead of hanging.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from coordinator.kafka.committed_filter import CommittedFilter, LogRecord
from coordinator.kafka.raw_batches import PartitionReader
from coordinator.kafka.raw_requests import RawClient
from coordinator.store.kafka.settings import KafkaLogSettings
from coordinator.store.log.frame import LogError

log = logging.getLogger(__name__)

#: Key of the leader's lease records (the log's records have no key).
LEASE_KEY = b"cr.lease"
#: A standby's pause at the high watermark before it fetches again: how late it sees
#: a record (and so how stale its tables are), without a busy loop of fetches.
TAIL_POLL_S = 0.05

#: ``on_value(offset, value)``: apply one committed record of the log.
OnLogValue = Callable[[int, bytes], None]
#: ``on_lease(value)``: a committed lease record's value.
OnLease = Callable[[bytes], None]


def _ignore_lease(_value: bytes) -> None:
    pass


class StandbyStopped(LogError):
    """The standby was stopped (a signal) before it took over."""


class LogTail:
    """Steps 1-3 of the module docstring, from `position` on."""

    def __init__(
        self, settings: KafkaLogSettings, position: int, on_value: OnLogValue, on_lease: OnLease = _ignore_lease
    ) -> None:
        self.settings = settings
        self.position = position
        self._on_value = on_value
        self._on_lease = on_lease
        self._filter = CommittedFilter()
        self.leases = 0
        self.last_lease: bytes | None = None

    def _client(self) -> RawClient:
        timeout_ms = self.settings.call_timeout_ms
        return RawClient(
            {
                "bootstrap_servers": self.settings.bootstrap.split(","),
                "client_id": "cr-coordinator-log",
                "request_timeout_ms": timeout_ms,
                "bootstrap_timeout_ms": timeout_ms,
            },
            time.monotonic() + self.settings.call_timeout_s,
        )

    def _step(self, client: RawClient, reader: PartitionReader) -> int:
        """Step 1: one fetch; returns the high watermark."""
        client.deadline = time.monotonic() + self.settings.call_timeout_s
        batches, high_watermark = reader.fetch(self.position)
        for batch in batches:
            for record in self._filter.feed(batch):
                self._apply(record)
            self.position = batch.last_offset + 1
        return high_watermark

    def _apply(self, record: LogRecord) -> None:
        if record.key == LEASE_KEY:
            self.leases += 1
            if record.value != self.last_lease:
                log.info("%s: the leader is %s", self.settings.where, (record.value or b"").decode(errors="replace"))
            self.last_lease = record.value
            self._on_lease(record.value or b"")
            return
        self._on_value(record.offset, record.value or b"")

    def read_to_end(self) -> int:
        """Step 2; returns the offset after the last batch read (the log's end)."""
        with self._client() as client:
            reader = PartitionReader(client, self.settings.topic, 0)
            stop = self._step(client, reader)
            while self.position < stop:
                self._step(client, reader)
        still_open = self._filter.open_transactions()
        if still_open:
            first = still_open[0]
            raise LogError(
                f"{self.settings.where}: a transaction of producer {first.producer_id} (epoch {first.producer_epoch}) "
                f"is open from offset {first.first_offset} after this coordinator fenced the log's transactional "
                f"id: another writer uses the topic; nothing was applied past it"
            )
        return self.position

    def follow(self, lease_s: float, stop: threading.Event) -> None:
        """Step 3."""
        with self._client() as client:
            reader = PartitionReader(client, self.settings.topic, 0)
            last_progress = time.monotonic()
            while True:
                before = self.position
                high_watermark = self._step(client, reader)
                now = time.monotonic()
                if self.position != before:
                    last_progress = now
                elif now - last_progress >= lease_s:
                    log.warning(
                        "%s: no write for %.1fs (lease %gs) at offset %d: taking over",
                        self.settings.where,
                        now - last_progress,
                        lease_s,
                        self.position,
                    )
                    return
                if self.position >= high_watermark and stop.wait(TAIL_POLL_S):
                    raise StandbyStopped(f"{self.settings.where}: the standby stopped before it took over")
