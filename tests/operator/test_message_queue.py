"""The batch queue: counts records, FIFO, timeouts, clear."""

from __future__ import annotations

import threading
import time

from cr_consumer.operator.message_queue import Batch, BatchQueue


def test_counts_records_not_batches_and_is_fifo():
    q = BatchQueue(100)
    q.put_many([Batch(0, "tp0", [1, 2, 3])])
    q.put_many([Batch(0, "tp1", [4, 5]), Batch(1, "tp0", [6])])
    assert len(q) == 6
    assert q.free() == 94
    assert q.get(0.1).records == [1, 2, 3]
    assert len(q) == 3
    assert [q.get(0.1).records, q.get(0.1).records] == [[4, 5], [6]]
    assert len(q) == 0
    assert q.get(0.01) is None


def test_get_waits_with_timeout_and_wakes_on_put():
    q = BatchQueue(10)
    t0 = time.monotonic()
    assert q.get(0.05) is None
    assert time.monotonic() - t0 >= 0.04
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(5)))
    t.start()
    q.put_many([Batch(0, "tp", [1])])
    t.join(5)
    assert got[0].records == [1]


def test_clear_returns_dropped_count():
    q = BatchQueue(10)
    q.put_many([Batch(0, "tp", list(range(7)))])
    assert q.clear() == 7
    assert len(q) == 0
    assert q.free() == 10
