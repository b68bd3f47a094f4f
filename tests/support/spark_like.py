"""A query driven as Spark drives the crkafka source, without Spark: plan, read
the ranges (the executors' work), a sink that takes time, then Spark's commit
log and its progress event. Several of them share one consumer group in the
ownership tests; each keeps its own "offset log" so that it can stop with a
batch in flight and be restarted from it, as a Spark query is."""

from __future__ import annotations

import collections
import threading
import time

from cr_consumer.spark.executor import read_range
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.planner import QueryPlanner
from cr_consumer.spark.sink_notices import SinkNotice

#: The sink's work per batch: a batch is in flight when a rebalance or a stop comes.
SINK_S = 0.3
#: Bound of a held sink (``hold_sink``): it waits for the stop at most this long.
HELD_SINK_S = 60.0


class SparkLikeQuery:
    """``latestOffset`` -> ``partitions`` -> read -> sink -> commit log -> progress event, in a loop.

    ``output`` holds what the sink committed (a batch's rows land there only when
    the whole batch is done); ``log`` is the offset log: ``(start, end)`` of the
    last planned batch and whether the sink committed it."""

    def __init__(self, options, name: str, *, limit: int = 300, log: tuple | None = None) -> None:
        self.options = options
        self.name = name
        self.limit = limit
        self.planner = QueryPlanner(options)
        self.output: collections.Counter = collections.Counter()
        self.log = log or (SourceOffset.initial(), SourceOffset.initial(), True)
        self.stop = threading.Event()
        self.in_flight = threading.Event()  # set while a batch is read or sunk
        self._hold = threading.Event()  # the next sink waits for the stop (``hold_sink``)
        self.held = threading.Event()  # set once a batch's sink waits for the stop
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name)

    def restarted(self, name: str) -> SparkLikeQuery:
        """The same query started again from its offset log (a new planner, as a new run)."""
        return SparkLikeQuery(self.options, name, limit=self.limit, log=self.log)

    def _batch(self, start: SourceOffset, end: SourceOffset) -> bool:
        """Run one batch; False when the stop came while it was in flight (nothing sunk)."""
        self.in_flight.set()
        try:
            rows: collections.Counter = collections.Counter()
            for rng in self.planner.ranges(start, end):
                for batch in read_range(self.options, rng):
                    rows.update(zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist()))
            if self._hold.is_set():
                self.held.set()
            if self.stop.wait(HELD_SINK_S if self._hold.is_set() else SINK_S):
                return False
            self.output.update(rows)  # the sink's commit
            self.log = (start, end, True)  # Spark's commit log
            self.planner.sink_notice(SinkNotice(end))  # Spark's progress event, through the listener
            return True
        finally:
            self.in_flight.clear()

    def _run(self) -> None:
        start, end, done = self.log
        try:
            if not done and not self._batch(start, end):  # replay of the batch in flight at the last stop
                return
            start = end
            while not self.stop.is_set():
                end = self.planner.latest_offset(start, self.limit)
                if end == start:
                    time.sleep(0.05)
                    continue
                self.log = (start, end, False)  # Spark's offset log
                if not self._batch(start, end):
                    return
                self.planner.commit(start)  # Spark commits end[N] after planning N+1
                start = end
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def hold_sink(self) -> None:
        """From the next batch on, the sink waits for the stop: ``held`` is then set, and a
        ``close`` stops the query with that batch in flight, however late it comes."""
        self._hold.set()

    def close(self) -> None:
        """Stop (a batch in flight is abandoned, as ``query.stop()`` does) and close the planner."""
        self.stop.set()
        if self.thread.ident is not None:  # a query never started has nothing to join
            self.thread.join(60)
        self.planner.close()

    def read_count(self) -> int:
        return sum(self.output.values())
