"""Transactional producers writing one topic at once, every :data:`ABORT_EVERY`-th transaction of
each aborted: the load under which the test broker stores concurrent produces and markers out of
order behind a high watermark it already moved (``coordinator/kafka/raw_batches.py`` step 2), for
the tests of readers at the head of a partition being written."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kafka import KafkaProducer

#: Every third transaction of a writer is aborted.
ABORT_EVERY = 3
#: Bound on a writer's end once it is told to stop (its last transaction and its close).
JOIN_S = 30.0

#: ``send(producer, label)``: the records of one transaction (flushed), named by ``label``.
Send = Callable[[KafkaProducer, str], None]


class ConcurrentTransactions:
    """One thread per transactional id, each writing transactions labelled ``<tid>-<n>`` with
    ``send`` until :meth:`stop`, pausing ``pause_s`` after each."""

    def __init__(self, bootstrap: str, tids: list[str], send: Send, *, pause_s: float = 0.0) -> None:
        self._bootstrap = bootstrap
        self._send = send
        self._pause_s = pause_s
        self._stop = threading.Event()
        self._committed: list[list[str]] = [[] for _ in tids]
        self._threads = [
            threading.Thread(target=self._write, args=(tid, done), daemon=True)
            for tid, done in zip(tids, self._committed, strict=True)
        ]

    def start(self) -> ConcurrentTransactions:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> list[str]:
        """Stop every writer and wait for it; the labels of the committed transactions."""
        self._stop.set()
        for t in self._threads:
            t.join(JOIN_S)
            assert not t.is_alive(), "a transactional writer did not end"
        return sorted(label for labels in self._committed for label in labels)

    def _write(self, tid: str, committed: list[str]) -> None:
        producer = KafkaProducer(bootstrap_servers=self._bootstrap, transactional_id=tid, max_block_ms=10_000)
        try:
            producer.init_transactions()
            n = 0
            while not self._stop.is_set():
                label = f"{tid}-{n}"
                producer.begin_transaction()
                self._send(producer, label)
                if n % ABORT_EVERY == ABORT_EVERY - 1:
                    producer.abort_transaction()
                else:
                    producer.commit_transaction()
                    committed.append(label)
                n += 1
                self._stop.wait(self._pause_s)
        finally:
            producer.close(timeout=10)
