"""Sink-commit notices: the driver tells the source runner as soon as Spark has
committed a batch, so that the runner commits its end to the group at once.

Why: the runner learns that a batch's sink committed only when Spark calls
``latestOffset`` for the next batch, which under a ``processingTime`` trigger
comes a whole trigger interval later. A query stopped (or killed) in that wait
would leave a committed batch below no group commit, and the next owner of its
partitions would read it again (:mod:`cr_consumer.spark.ownership`, step 1).
Spark posts a query progress event right after it writes a batch to its
commit log (measured: 0.1 s after the commit file), to the listeners of the
driver's session.

1. ``register(spark)`` adds one :class:`SinkCommitListener` to the session.
2. At each progress event, the listener takes every source end offset that is
   a crkafka offset with a query id and pushes, without blocking, a
   :class:`SinkNotice` (the end, and the query's checkpoint location) to that
   query's notice socket (:func:`notice_endpoint`: an IPC socket named after the
   query id; the runner is a child process of the driver's JVM on the same
   host). No runner listening: the notice is dropped (the runner's own
   ``latestOffset`` commits the end later).
3. The runner (:class:`NoticeReceiver`, a thread started with the planner)
   receives each notice, validates it (size bound, format, its own query id)
   and hands it to the planner, which commits the end like the ``start`` of a
   ``latestOffset`` and keeps the checkpoint location, if the end is one it
   handed to Spark (any local process can reach the socket: a forged end is
   dropped, and so is its checkpoint location). A malformed notice is
   logged and dropped; it never stops the thread.
4. At close the planner first waits, briefly, for the notice of the last batch
   Spark ran when that batch is not committed yet (a query that ends by
   itself, ``trigger(once=True)``, is stopped right after its commit log is
   written, before the notice comes), then reads Spark's commit log in that
   checkpoint location (when it is on a local file system) and commits the
   newest committed batch's end: ``query.stop()`` lets a batch whose sink is
   committing finish, and its progress event may never be posted.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs
import zmq

from cr_consumer.spark.offsets import OffsetFormatError, SourceOffset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
    )

log = logging.getLogger(__name__)

#: Bound on one notice (an offset of a few thousand partitions is well below it).
MAX_NOTICE_BYTES = 1 << 20
#: The receiver's poll; bounds how late it notices a stop.
RECEIVE_POLL_MS = 200
#: Bound on joining the receiver's thread at stop.
STOP_TIMEOUT_S = 5.0
#: Notices queued for a runner not connected yet (past it they are dropped).
SEND_QUEUE = 16
#: Notice sockets a driver keeps (one per query seen; the oldest is closed past it).
MAX_SENDERS = 64


#: The notice's format version.
NOTICE_VERSION = 1
#: Bound on a checkpoint location's length in a notice.
MAX_CHECKPOINT_CHARS = 4096


@attrs.frozen
class SinkNotice:
    """Spark committed the batch ending at ``end``; ``checkpoint`` is the query's
    checkpoint location as Spark resolved it (a URI; None when unknown)."""

    end: SourceOffset
    checkpoint: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"v": NOTICE_VERSION, "end": self.end.to_json(), "checkpoint": self.checkpoint}

    @classmethod
    def from_json(cls, doc: object) -> SinkNotice:
        if not isinstance(doc, dict) or doc.get("v") != NOTICE_VERSION:
            raise OffsetFormatError(f"not a version-{NOTICE_VERSION} sink-commit notice")
        checkpoint = doc.get("checkpoint")
        if checkpoint is not None and not (
            isinstance(checkpoint, str) and 0 < len(checkpoint) <= MAX_CHECKPOINT_CHARS and checkpoint.isprintable()
        ):
            raise OffsetFormatError("bad checkpoint location in a sink-commit notice")
        end = doc.get("end")
        if not isinstance(end, dict):
            raise OffsetFormatError("a sink-commit notice without an end offset")
        return cls(SourceOffset.from_json(end), checkpoint)


def notice_endpoint(query: str) -> str:
    """The IPC endpoint of query ``query``'s runner (query ids are hex: a safe name). On Linux a
    name in the abstract socket namespace (``@``): it vanishes with the runner, where a socket
    file in the temporary directory would stay behind after a runner killed -9."""
    name = f"crkafka-{query}.notices"
    if sys.platform.startswith("linux"):
        return f"ipc://@{name}"
    return f"ipc://{os.path.join(tempfile.gettempdir(), name)}"


class NoticeReceiver:
    """Step 3: the runner's end of the notices; ``on_end`` runs on the receiver's thread."""

    def __init__(self, query: str, on_notice: Callable[[SinkNotice], None]) -> None:
        self.query = query
        self._on_notice = on_notice
        self._stop = threading.Event()
        self._socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_NOTICE_BYTES)
        self._socket.bind(notice_endpoint(query))
        self._thread = threading.Thread(target=self._run, name=f"crkafka-notices-{query}", daemon=True)
        self.received = 0

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if not self._socket.poll(RECEIVE_POLL_MS):
                    continue
                self.handle(self._socket.recv())
        finally:
            self._socket.close(0)

    def handle(self, raw: bytes) -> None:
        """Validate one notice and hand it to the planner; a bad one is logged and dropped."""
        try:
            notice = SinkNotice.from_json(json.loads(raw))
        except (ValueError, OffsetFormatError) as exc:
            log.warning("crkafka: dropped a malformed sink-commit notice (%d bytes): %s", len(raw), exc)
            return
        if notice.end.query != self.query:
            log.warning(
                "crkafka: dropped a sink-commit notice of query %r (this runner is %r)", notice.end.query, self.query
            )
            return
        self.received += 1
        try:
            self._on_notice(notice)
        except Exception:  # the commit is retried at the next trigger; the receiver goes on
            log.exception("crkafka: committing a sink-commit notice (epoch %d) failed", notice.end.epoch)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)
        else:
            self._socket.close(0)


def crkafka_ends(end_offsets: list[str]) -> list[SourceOffset]:
    """Step 2: the crkafka offsets (with a query id) among a progress event's source end offsets."""
    out = []
    for raw in end_offsets:
        try:
            end = SourceOffset.from_json(json.loads(raw))
        except (ValueError, TypeError, OffsetFormatError):
            continue  # another source's offset
        if end.query:
            out.append(end)
    return out


class NoticeSender:
    """Step 2: the driver's end: one PUSH socket per query, kept, so that a notice
    waits (at most SEND_QUEUE of them) while the connection to the runner forms."""

    def __init__(self) -> None:
        self._sockets: OrderedDict[str, zmq.Socket[bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def send(self, notice: SinkNotice) -> bool:
        """Push ``notice`` to its query's runner without blocking; False when it was dropped."""
        end = notice.end
        with self._lock:
            socket = self._sockets.get(end.query)
            if socket is None:
                socket = zmq.Context.instance().socket(zmq.PUSH)
                socket.setsockopt(zmq.LINGER, 0)
                socket.setsockopt(zmq.SNDHWM, SEND_QUEUE)
                socket.connect(notice_endpoint(end.query))
                self._sockets[end.query] = socket
                if len(self._sockets) > MAX_SENDERS:
                    self._sockets.popitem(last=False)[1].close(0)
            try:
                socket.send(json.dumps(notice.to_json()).encode(), zmq.NOBLOCK)
            except zmq.Again:
                return False
            return True

    def close(self) -> None:
        with self._lock:
            for socket in self._sockets.values():
                socket.close(0)
            self._sockets.clear()


_listening: weakref.WeakSet[SparkSession] = weakref.WeakSet()  # sessions with the listener


def _checkpoint_root(spark: SparkSession, query_id: str) -> str | None:
    """The query's resolved checkpoint location, through PySpark's JVM handle of the query
    (the private ``_jsq``: no public API gives it); None if not found, and on a Spark
    Connect session, whose queries have no JVM handle in the client."""
    from pyspark.sql.streaming.query import StreamingQuery as ClassicStreamingQuery

    query = spark.streams.get(query_id)
    if not isinstance(query, ClassicStreamingQuery):
        return None
    return str(query._jsq.streamingQuery().resolvedCheckpointRoot())


def install_listener(spark: SparkSession) -> None:
    """Step 1: add the notices' listener to ``spark`` (once per session)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    if spark in _listening:
        return
    sender = NoticeSender()
    roots: dict[str, str | None] = {}  # Spark's query id -> its checkpoint location

    def checkpoint_of(query_id: str) -> str | None:
        if query_id not in roots:
            try:
                roots[query_id] = _checkpoint_root(spark, query_id)
            except Exception:  # the notices still carry the end; only the close-time read is lost
                log.exception("crkafka: the checkpoint location of query %s could not be read", query_id)
                roots[query_id] = None
        return roots[query_id]

    class SinkCommitListener(StreamingQueryListener):
        def onQueryStarted(self, event: QueryStartedEvent) -> None:
            pass

        def onQueryProgress(self, event: QueryProgressEvent) -> None:
            try:
                ends = crkafka_ends([source.endOffset for source in event.progress.sources])
                if ends:
                    checkpoint = checkpoint_of(str(event.progress.id))
                    for end in ends:
                        sender.send(SinkNotice(end, checkpoint))
            except Exception:  # a listener's failure must not reach Spark's listener bus
                log.exception("crkafka: sending a sink-commit notice failed")

        def onQueryIdle(self, event: QueryIdleEvent) -> None:
            pass

        def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
            roots.pop(str(event.id), None)

    spark.streams.addListener(SinkCommitListener())
    _listening.add(spark)


__all__ = [
    "MAX_NOTICE_BYTES",
    "NoticeReceiver",
    "NoticeSender",
    "SinkNotice",
    "crkafka_ends",
    "install_listener",
    "notice_endpoint",
]
