"""Reading a partition's table back from its changelog, in the background, for whichever member
owns the partition now (``partitioned_tables.py``: the store it restores for; its step 6).

1. The source seeks a partition (after a reset, or an assignment) and hands it to
   :meth:`TableRestores.start`, which reads it on one of the store's restore threads
   (:data:`RESTORE_THREADS`) while the source keeps the partition paused
   (``cr_consumer/operator/rebalance.py``) and the member's other partitions flow. The source
   resumes it once :meth:`TableRestores.restoring` no longer names it; its first record
   :meth:`TableRestores.take` s the result (a partition never handed over is read there, on
   the process thread).
2. The read: the partition's *pointer* (the committed offset of the group named like the
   changelog, ``coordinator/kafka/group_offsets.py``; read once per reset for every partition),
   then the committed change sets of its changelog partition from the pointer (from the start
   without one) to the high watermark, applied in log order; a base starts the table again. The
   first record read must be a base at the pointer; otherwise (a changelog deleted and made
   again under a group's old pointers) the partition is read from its start, with a warning.
   The region resolves every completed checkpoint's transaction in the reset, before any member
   resumes, so the committed log holds the state at the checkpoint the source replays from.
3. A transaction still open on the partition (one the region is resolving) holds the restore
   until it is decided, at most :data:`OPEN_TRANSACTION_WAIT_S`; past that it fails.
4. A restore has no bound on its length, only on its progress: each batch read moves its
   deadline :data:`RESTORE_STALL_S` on, so a large partition is restored however long it takes,
   and a changelog that stops answering (broker gone, no leader) fails the restore. A failed
   restore raises at :meth:`TableRestores.take`: the partition's first batch fails, and the
   region resets.
5. :meth:`TableRestores.drop` (a reset) ends the current *generation*: its restores stop at
   their next batch and their results are dropped; the reset's seeks start new ones.
   :meth:`TableRestores.forget` drops one partition's (revoked: its next owner writes its
   changelog from then on).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import attrs

from coordinator.kafka.committed_filter import LogRecord
from coordinator.kafka.group_offsets import read_offsets
from coordinator.kafka.raw_batches import CommittedRead, read_committed_with
from coordinator.kafka.raw_requests import RawClient
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.state.changelog import BASE_HEADER, decode_changes

log = logging.getLogger(__name__)

#: Step 4's bound on a restore's progress: each batch read moves the read's deadline this far on,
#: so a changelog that stops answering fails the restore, and the region resets, instead of
#: keeping its partition paused for good; a long restore that progresses is never cut.
RESTORE_STALL_S = 30.0
#: Step 3's bound on waiting for a transaction still open on a partition being restored.
OPEN_TRANSACTION_WAIT_S = 60.0
#: Pause between two reads of a partition whose changelog holds a transaction still open.
RESTORE_RETRY_S = 0.1
#: How often a record waiting for its partition's restore (step 1: a partition never handed over,
#: or handed over just before) checks the restore's progress.
RESTORE_WAIT_SLICE_S = 1.0


@attrs.frozen
class Restored:
    """One partition's table as read from its changelog (step 2)."""

    table: dict[Any, Any]
    #: changes on the changelog since the table's last base.
    since_base: int
    records: int
    changes: int


class RestoreCancelled(Exception):
    """A restore of a generation a reset has ended (step 5: its result would be dropped)."""


class _Generation:
    """What the restores started since one reset share (step 5)."""

    def __init__(self) -> None:
        #: Set by the reset (or close) that ends this generation: its restores stop at their next batch.
        self.cancelled = threading.Event()
        self.pointers: dict[int, int | None] | None = None  # step 2's, read once
        self.pointers_lock = threading.Lock()
        #: monotonic time of the last batch any of this generation's restores read.
        self.progress_at = time.monotonic()


class TableRestores:
    """The restores of one store's partitions (module docstring). ``partitions()`` ensures the
    changelog and gives its partition count; ``settings`` are the raw client's."""

    def __init__(
        self,
        owner: str,
        changelog: str,
        settings: Mapping[str, Any],
        *,
        partitions: Callable[[], int],
        threads: int,
        request_timeout_ms: int,
    ) -> None:
        self._owner = owner
        self._changelog = changelog
        self._settings = settings
        self._partitions = partitions
        self._request_timeout_ms = request_timeout_ms
        #: Guards the generation and ``_restores``: the source's threads start and forget
        #: restores, the process thread takes them, a reset (the control thread) drops them.
        self._lock = threading.Lock()
        self._generation = _Generation()
        self._restores: dict[int, Future[Restored]] = {}
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=f"{owner}-restore")

    def start(self, partitions: Iterable[int]) -> None:
        """Step 1: read ``partitions`` on the restore threads (one already started is left)."""
        with self._lock:
            generation = self._generation
            for partition in partitions:
                if partition not in self._restores:
                    self._restores[partition] = self._pool.submit(self._read_table, partition, generation)

    def restoring(self) -> set[int]:
        """The partitions whose restore is started and not finished (done or failed)."""
        with self._lock:
            return {partition for partition, restore in self._restores.items() if not restore.done()}

    def forget(self, partitions: Collection[int]) -> None:
        """Step 5 for revoked ``partitions``."""
        with self._lock:
            for partition in partitions:
                restore = self._restores.pop(partition, None)
                if restore is not None:
                    restore.cancel()

    def take(self, partition: int) -> Restored:
        """The partition's restore's result, waited for while its generation progresses; read on
        the calling thread if it was never started."""
        with self._lock:
            generation = self._generation
            restore = self._restores.pop(partition, None)
        if restore is None:
            return self._read_table(partition, generation)
        while True:
            try:
                return restore.result(timeout=RESTORE_WAIT_SLICE_S)
            except FutureTimeout:
                stalled = time.monotonic() - generation.progress_at
                if stalled > RESTORE_STALL_S + OPEN_TRANSACTION_WAIT_S:
                    restore.cancel()
                    raise TimeoutError(
                        f"operator {self._owner!r}: the restore of {self._changelog}[{partition}] made no"
                        f" progress for {stalled:.0f} s"
                    ) from None

    def drop(self) -> None:
        """Step 5: a reset ends the generation."""
        with self._lock:
            self._generation.cancelled.set()
            self._generation = _Generation()
            for restore in self._restores.values():
                restore.cancel()
            self._restores = {}

    def close(self) -> None:
        """Stop the restores (each at its next batch: one request's bound at most) and the threads."""
        with self._lock:
            self._generation.cancelled.set()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- step 2 -----------------------------------------------------------------------------
    def _pointer(self, partition: int, generation: _Generation) -> int | None:
        with generation.pointers_lock:
            if generation.pointers is None:
                generation.pointers = read_offsets(
                    self._settings,
                    self._changelog,
                    self._changelog,
                    range(self._partitions()),
                    timeout_ms=self._request_timeout_ms,
                )
            return generation.pointers.get(partition)

    def _read_table(self, partition: int, generation: _Generation) -> Restored:
        self._partitions()
        t0 = time.monotonic()
        pointer = self._pointer(partition, generation)
        read = self._read(partition, pointer or 0, generation)
        if pointer and not (read.records and read.records[0].offset == pointer and _is_base(read.records[0])):
            log.warning(
                "operator %r: %s[%d]: the pointer %d names no base; reading the partition from its start",
                self._owner,
                self._changelog,
                partition,
                pointer,
            )
            read = self._read(partition, 0, generation)
        table: dict[Any, Any] = {}
        changes = since_base = 0
        base_seq: int | None = None  # the base being read, None after any other change set
        for stored in read.records:
            change_set = decode_changes(
                partition, stored.offset, stored.key, stored.value, stored.headers, topic=self._changelog
            )
            if change_set.base and change_set.seq != base_seq:
                table.clear()
                since_base = 0
            base_seq = change_set.seq if change_set.base else None
            for key, _, state in change_set.changes:
                if state is None:
                    table.pop(key, None)
                else:
                    table[key] = state
            changes += len(change_set.changes)
            if not change_set.base:
                since_base += len(change_set.changes)
        log.info(
            "operator %r: restored %s[%d] from %d: %d keys from %d changes in %d records in %.3f s",
            self._owner,
            self._changelog,
            partition,
            pointer or 0,
            len(table),
            changes,
            len(read.records),
            time.monotonic() - t0,
        )
        return Restored(table, since_base, len(read.records), changes)

    def _read(self, partition: int, start: int, generation: _Generation) -> CommittedRead:
        """Steps 3 and 4 around one read of the committed records from ``start``."""

        def check_cancelled() -> None:
            if generation.cancelled.is_set():
                raise RestoreCancelled(f"{self._changelog}[{partition}]: the restore's reset generation ended")

        def progressed(client: RawClient) -> None:
            check_cancelled()
            generation.progress_at = time.monotonic()
            client.deadline = generation.progress_at + RESTORE_STALL_S

        def decided() -> CommittedRead | None:
            check_cancelled()  # also while waiting for an open transaction: a close never waits it out
            with RawClient(self._settings, time.monotonic() + RESTORE_STALL_S) as client:
                read = read_committed_with(client, self._changelog, partition, start, on_batch=progressed)
            return None if read.open_transactions else read

        return wait_until(
            decided,
            OPEN_TRANSACTION_WAIT_S,
            f"{self._changelog}[{partition}] without open transactions (operator {self._owner!r}'s restore)",
            interval=RESTORE_RETRY_S,
        )


def _is_base(record: LogRecord) -> bool:
    return any(name == BASE_HEADER for name, _ in record.headers)


__all__ = ["OPEN_TRANSACTION_WAIT_S", "RESTORE_STALL_S", "RestoreCancelled", "Restored", "TableRestores"]
