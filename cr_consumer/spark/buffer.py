"""The batch buffer: records submitted by the members between two batch cuts.

Every member's process thread calls :meth:`BatchBuffer.submit_batch` with one
partition's records from one poll (kafka-python ``ConsumerRecord`` objects),
while it holds its region permit. The buffer keeps them as lists (no per-record
work) and converts them to Arrow in chunks of :data:`CHUNK_ROWS` rows on the
submitting thread, so the conversion overlaps with Spark running the previous
batch in the JVM instead of delaying the next ``read()``.

:meth:`cut` is called by the source runner after every member has drained
(their permits are held, so nothing is being submitted): it returns the Arrow
batches of everything submitted since the previous cut and empties the buffer.
:meth:`clear` drops everything (a reset: those records will be fetched again).

Back-pressure (``maxRecordsPerBatch``, a soft cap): once the buffer holds
``cap`` rows, ``submit_batch`` waits until the next cut or clear, unless a
cut or reset is starting (:meth:`hold_off`): the source then needs the permit
the submitter holds, so submitters stop waiting until :meth:`cut`/:meth:`clear`. A submitter therefore never blocks a drain, and a batch holds
at most ``cap`` plus one poll's records per member. The member's bounded queue
then fills and its event thread pauses fetching, so memory stays bounded.
"""

from __future__ import annotations

import threading

import pyarrow as pa

from cr_consumer.spark.arrow import records_to_batch

#: Rows converted to Arrow at once on the submitting thread.
CHUNK_ROWS = 16_384

#: One wait of a submitter blocked by the cap; bounds how late it notices a
#: close (the cut, clear and drain start wake it at once).
CAP_WAIT_S = 0.2


class BufferClosed(RuntimeError):
    """The source is shutting down; the submitting member must stop."""


class BatchBuffer:
    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._cond = threading.Condition()
        self._pending: list = []  # records not yet converted
        self._chunks: list[pa.RecordBatch] = []
        self._rows = 0
        self._generation = 0  # bumped by cut/clear: wakes capped submitters
        self._holding_off = False  # a cut/reset is taking the permits: never wait
        self._closed = False

    @property
    def rows(self) -> int:
        return self._rows

    def submit_batch(self, records: list) -> None:
        """Take one poll's records of one partition (member process thread)."""
        if not records:
            return
        with self._cond:
            if self._closed:
                raise BufferClosed("the crkafka source is closing")
            if self._rows >= self._cap and not self._holding_off:
                generation = self._generation
                while self._generation == generation and not self._closed and not self._holding_off:
                    self._cond.wait(CAP_WAIT_S)
                if self._closed:
                    raise BufferClosed("the crkafka source is closing")
            self._pending.extend(records)
            self._rows += len(records)
            if len(self._pending) < CHUNK_ROWS:
                return
            todo, self._pending = self._pending, []
        chunk = records_to_batch(todo)  # outside the lock: other members keep submitting
        with self._cond:
            self._chunks.append(chunk)

    def hold_off(self) -> None:
        """A cut or reset starts: capped submitters return (and release their
        permit) and nobody waits on the cap until the next cut or clear."""
        with self._cond:
            self._holding_off = True
            self._cond.notify_all()

    def cut(self) -> list[pa.RecordBatch]:
        """Everything submitted since the last cut, as Arrow batches (members drained)."""
        with self._cond:
            todo, self._pending = self._pending, []
            chunks, self._chunks = self._chunks, []
            self._rows = 0
            self._generation += 1
            self._holding_off = False
            self._cond.notify_all()
        if todo:
            chunks.append(records_to_batch(todo))
        return chunks

    def clear(self) -> int:
        """Drop everything (reset); returns the number of rows dropped."""
        with self._cond:
            dropped = self._rows
            self._pending, self._chunks, self._rows = [], [], 0
            self._generation += 1
            self._holding_off = False
            self._cond.notify_all()
        return dropped

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
