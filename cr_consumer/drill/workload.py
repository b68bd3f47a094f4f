"""The drill's input: produce messages and record them in the manifest.

Values are UTF-8 text ``drill:<seed>:<topic>:<partition>:<k>`` (k counts per
partition); a poison record's value is ``b"\\xff\\xfe"`` + text, which is not
UTF-8; with ``marked_poison`` (the drill's dead-letter mode) a seeded coin toss
per poison record chooses between that and the text behind
:data:`~cr_consumer.drill.pipeline.POISON_MARKER`, which decodes but which the
drill pipeline's map rejects. Records go round robin over the topic's
partitions with explicit partition numbers, in chunks: each chunk is sent, flushed, and every record's
acknowledged offset is written to the manifest (offsets come from the broker's
acknowledgements, not from assumptions).

:class:`Workload` runs the production on a thread it owns:

1. ``start()`` starts the thread; it produces ``total`` records, at ``rate``
   records/s when ``rate`` > 0 (else as fast as the producer goes);
2. ``stop()`` asks it to stop early and ``join(timeout)`` waits for it;
   a production error is kept and re-raised by ``join``.

:func:`produce_into` produces synchronously (the new-topic fault uses it).
"""

from __future__ import annotations

import logging
import random
import threading
import time

from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.pipeline import POISON_MARKER
from cr_consumer.testing.kafka_util import producer

log = logging.getLogger(__name__)

POISON_PREFIX = b"\xff\xfe"
#: Records per send/flush/acknowledge round: bounds the futures held at once.
CHUNK = 2000
#: Bound on waiting for one chunk's acknowledgements: a broker that stops
#: answering fails the drill instead of hanging it. A drill that pauses the
#: broker on purpose adds the pause (``Workload(ack_timeout_s=...)``).
ACK_TIMEOUT_S = 30.0


def value_for(seed: int, topic: str, partition: int, k: int) -> str:
    return f"drill:{seed}:{topic}:{partition}:{k}"


class _Producer:
    """Sends chunks and records acknowledged offsets in the manifest."""

    def __init__(
        self,
        bootstrap: str,
        manifest: Manifest,
        lock: threading.Lock,
        seed: int,
        poison_ratio: float,
        rng: random.Random,
        counters: dict[tuple[str, int], int] | None = None,
        ack_timeout_s: float = ACK_TIMEOUT_S,
        marked_poison: bool = False,
    ) -> None:
        self.p = producer(bootstrap, linger_ms=5)
        self.marked_poison = marked_poison
        self.ack_timeout_s = ack_timeout_s
        self.manifest = manifest
        self.lock = lock
        self.seed = seed
        self.poison_ratio = poison_ratio
        self.rng = rng
        self.counters = counters if counters is not None else {}
        self.sent = 0
        self.poison = 0

    def send(self, topic: str, partitions: list[int], n: int) -> None:
        """``n`` records, in chunks of at most CHUNK."""
        for sent in range(0, n, CHUNK):
            self.send_chunk(topic, partitions, min(CHUNK, n - sent))

    def send_chunk(self, topic: str, partitions: list[int], n: int) -> None:
        pending = []
        for _ in range(n):
            part = partitions[self.sent % len(partitions)]
            k = self.counters.get((topic, part), 0)
            self.counters[(topic, part)] = k + 1
            text = value_for(self.seed, topic, part, k)
            poison = self.poison_ratio > 0 and self.rng.random() < self.poison_ratio
            raw = self._poison_value(text) if poison else text.encode()
            pending.append((topic, part, text, poison, self.p.send(topic, value=raw, partition=part)))
            self.sent += 1
            self.poison += poison
        self.p.flush(timeout=self.ack_timeout_s)
        with self.lock:
            for topic, part, text, poison, fut in pending:
                md = fut.get(timeout=self.ack_timeout_s)
                self.manifest.add(topic, part, md.offset, None if poison else text, poison=poison)

    def _poison_value(self, text: str) -> bytes:
        if self.marked_poison and self.rng.random() < 0.5:
            return (POISON_MARKER + text).encode()
        return POISON_PREFIX + text.encode()

    def close(self) -> None:
        self.p.close(timeout=self.ack_timeout_s)


class Workload:
    """Produces ``total`` records into ``topic`` on its own thread (see the module docstring).

    Shared thread state: ``produced`` and ``poison`` are
    written by the producer thread (by the caller's thread in :meth:`warmup`
    and :meth:`produce_more`, before or after that thread runs) and read by the
    drill's thread (progress lines); ``manifest`` is guarded by ``lock``.
    """

    produced: int
    poison: int

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        total: int,
        manifest: Manifest,
        *,
        seed: int = 0,
        rate: float = 0.0,
        poison_ratio: float = 0.0,
        marked_poison: bool = False,
        ack_timeout_s: float = ACK_TIMEOUT_S,
    ) -> None:
        self.bootstrap = bootstrap
        self.marked_poison = marked_poison
        self.ack_timeout_s = ack_timeout_s
        self.topic = topic
        self.partitions = list(range(partitions))
        self.total = total
        self.manifest = manifest
        self.lock = threading.Lock()
        self.seed = seed
        self.rate = rate
        self.poison_ratio = poison_ratio
        self.rng = random.Random(seed * 7919 + 1)
        self.produced = 0
        self.poison = 0
        self.done = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="drill-producer", daemon=True)
        self.started_at: float | None = None
        self._counters: dict[tuple[str, int], int] = {}

    def warmup(self, n: int) -> None:
        """Produce ``n`` of the ``total`` records now, on the caller's thread
        (so the region has input as soon as it starts)."""
        n = min(n, self.total) - self.produced
        prod = self._producer()
        try:
            prod.send(self.topic, self.partitions, n)
            self.produced += max(n, 0)
            self.poison = prod.poison
        finally:
            prod.close()

    def produce_more(self, n: int) -> None:
        """Produce ``n`` records beyond ``total`` now (after the thread ended),
        e.g. so that a fault that acts on records still sees some."""
        prod = self._producer()
        try:
            prod.send(self.topic, self.partitions, n)
            self.produced += n
            self.total += n
        finally:
            prod.close()

    def _producer(self) -> _Producer:
        prod = _Producer(
            self.bootstrap,
            self.manifest,
            self.lock,
            self.seed,
            self.poison_ratio,
            self.rng,
            self._counters,
            self.ack_timeout_s,
            self.marked_poison,
        )
        prod.sent = self.produced
        prod.poison = self.poison
        return prod

    def start(self) -> Workload:
        self.started_at = time.time()
        self._thread.start()
        return self

    def _run(self) -> None:
        prod = self._producer()
        try:
            t0 = time.monotonic()
            base = self.produced
            chunk = CHUNK if self.rate <= 0 else max(1, min(CHUNK, int(self.rate / 20)))
            while self.produced < self.total and not self._stop.is_set():
                n = min(chunk, self.total - self.produced)
                prod.send_chunk(self.topic, self.partitions, n)
                self.produced += n
                self.poison = prod.poison
                if self.rate > 0:
                    ahead = (self.produced - base) / self.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        self._stop.wait(ahead)  # rate limit; stop() cuts it short
        except BaseException as exc:  # kept and re-raised by join(): the drill fails loudly
            log.exception("drill producer failed")
            self._error = exc
        finally:
            try:
                prod.close()
            finally:
                self.done.set()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"drill producer still running after {timeout:.0f}s ({self.produced}/{self.total} sent)")
        if self._error is not None:
            raise RuntimeError(f"drill producer failed: {self._error!r}") from self._error


def produce_into(
    bootstrap: str, topic: str, partitions: int, n: int, manifest: Manifest, lock: threading.Lock, *, seed: int
) -> None:
    """Produce ``n`` records into ``topic`` now, recording them in ``manifest``."""
    prod = _Producer(bootstrap, manifest, lock, seed, 0.0, random.Random(seed))
    try:
        prod.send(topic, list(range(partitions)), n)
    finally:
        prod.close()
