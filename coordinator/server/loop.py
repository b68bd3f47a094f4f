"""The coordinator's ZeroMQ server loop: one ROUTER socket, one loop thread, group commit.

The parts (the envelope and messages are in :mod:`coordinator.protocol.wire.protocol`):

* this module: the socket, the loop thread, the load, housekeeping,
  start/stop, and the extension API services call (:mod:`coordinator.server.api`);
* :mod:`coordinator.server.scheduler`: timers, cross-thread calls, the services'
  tick hooks and the periodic steps, each guarded, with a backoff after a failure;
* :mod:`coordinator.server.dispatch`: one received frame -> checks -> handler ->
  reply or error reply (``TOO_LARGE``, ``MALFORMED``, ``UNSUPPORTED_VERSION``,
  ``LOAD_IN_PROGRESS``, ``UNKNOWN_TYPE``, ``INVALID``, ``INTERNAL``);
* :mod:`coordinator.server.group_commit`: the outbox; one ``store.sync()`` per batch,
  and no reply before it.

Protocol loop:

1. Start: the ROUTER socket is bound in :meth:`CoordinatorServer.start` (so a
   bad endpoint fails the caller), the advertised endpoint (``advertise``, else
   the bound one) is handed to the log's `Leadership` before the load starts,
   the loop thread starts, and a load thread runs ``store.load()``. Until the
   load completes, every request gets a ``LOAD_IN_PROGRESS`` error reply (clients
   retry with backoff), or ``NOT_LEADER`` naming the leader from a standby that
   knows it. A failed load stops the server (``server.failure`` holds the exception).
2. Each iteration first takes the epoch every frame of the iteration carries: the
   highest of the leader's epochs this process has known (``Leadership.leader()``),
   so it never goes down within one process. It polls the socket (and a wake-up
   pipe) with a timeout bounded by the next timer, so timers run on time even
   when no request arrives. It also polls the socket's connection monitor:
   connections over the limit are closed there (:mod:`coordinator.server.connections`).
3. It reads ALL ready frames without blocking (up to ``MAX_BATCH``) and hands
   each to the dispatcher, which checks it and calls its handler. Handlers
   append to the store and queue their replies.
4. Due timers, thread-safe callbacks and the services' tick hooks run; once
   loaded, retention expiry and housekeeping (compaction, metrics) when due.
5. If anything was appended (a handler called :meth:`mark_dirty`),
   ``store.sync()`` runs ONCE for the whole batch: the group commit.
6. Only then are the queued replies and pushes sent, so no write is
   acknowledged before it is on disk. If the sync fails, every queued reply is
   replaced by an ``INTERNAL`` error and the server stops (fail-stop: a restart
   replays the log, which holds exactly what reached the disk).
7. Stop: :meth:`stop` sets a flag and wakes the loop; the loop syncs and sends
   what is queued (no sync after a failure), closes the socket and ends.

Nothing a request causes stops the loop: a bad frame gets an error reply
and the loop moves on; an unexpected exception in a handler is logged with its
traceback and answered with ``INTERNAL``; a timer, cross-thread call or tick
hook that raises is logged with its traceback and the loop goes on (a service
turns its own failures into state, e.g. a FAILED region); retention expiry and
housekeeping that raise are logged and retried after a backoff
(:mod:`coordinator.server.scheduler`).
Only a failed sync (the disk) or a failure of the loop machinery itself stops
the server (``server.failure``): a restart then replays what reached the disk.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import zmq

from coordinator import security
from coordinator.protocol.common.endpoints import check_endpoint
from coordinator.protocol.common.osutil import WakePipe
from coordinator.protocol.wire.envelope import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_LIMIT_BYTES, MIN_FRAME_LIMIT_BYTES
from coordinator.protocol.wire.errors import CoordinatorError
from coordinator.protocol.wire.protocol import MessageClass
from coordinator.protocol.wire.status import CoordinatorStatus, LoadReport, Role
from coordinator.server.api import (
    CurveServerConfig,
    Handler,
    Leadership,
    M,
    ReplyMessage,
    Request,
    ServerStore,
    Service,
    SoleLeader,
    Timer,
)
from coordinator.server.builtin import BuiltinService
from coordinator.server.connections import ConnectionLimiter, ConnectionLimits, configure_socket
from coordinator.server.dispatch import Dispatcher
from coordinator.server.group_commit import GroupCommit
from coordinator.server.limits import LimitCounter, Limits
from coordinator.server.metrics import CoordinatorMetrics
from coordinator.server.scheduler import LoopScheduler, Periodic, guarded

log = logging.getLogger(__name__)

_T = TypeVar("_T")  # the result of a call run on the loop thread

#: Longest poll wait when no timer is due, so tick hooks and housekeeping run
#: even on an idle server (prevents a stalled region controller tick).
TICK_S = 0.1
#: Frames handled per iteration at most, so one flood cannot delay the sync
#: and replies of the requests already read (bounds reply latency).
MAX_BATCH = 4096
#: Interval of the metrics refresh (store stats -> gauges).
HOUSEKEEPING_S = 1.0
#: Interval of retention expiry (compaction is checked every HOUSEKEEPING_S).
EXPIRE_INTERVAL_S = 60.0
#: How long stop() waits for the loop thread, so a wedged handler cannot hang shutdown.
STOP_TIMEOUT_S = 10.0
#: Hard limit at which ZeroMQ drops a connection instead of delivering the
#: frame (protects memory); frames between max_frame_bytes and this get TOO_LARGE.
HARD_FRAME_FACTOR = 4


class CoordinatorServer:
    """The loop and the `ServerApi` its services see (see the module docstring)."""

    # State shared between threads (the loop, the load thread, the HTTP thread, the owner):
    #: Set by the loop thread once the load finished; read by services, dispatch and HTTP.
    loaded: threading.Event
    #: Written by the load thread before `loaded` is set; read afterwards (status).
    load_report: LoadReport | None
    #: Written by the load or loop thread when it stops the server; read by the owner after `wait()`.
    failure: BaseException | None
    #: Written by `start()` (the owner) before the loop thread starts.
    endpoint: str | None
    connections: ConnectionLimiter | None

    def __init__(
        self,
        store: ServerStore,
        bind: str,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        curve: CurveServerConfig | None = None,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        metrics: CoordinatorMetrics | None = None,
        expire_interval_s: float = EXPIRE_INTERVAL_S,
        connection_limits: ConnectionLimits | None = None,
        limits: Limits | None = None,
        leadership: Leadership | None = None,
        advertise: str | None = None,
    ) -> None:
        if not MIN_FRAME_LIMIT_BYTES <= max_frame_bytes <= MAX_FRAME_LIMIT_BYTES:
            raise ValueError(
                f"max_frame_bytes must be in {MIN_FRAME_LIMIT_BYTES}..{MAX_FRAME_LIMIT_BYTES}, got {max_frame_bytes}"
            )
        self.store = store
        self.bind_address = bind
        self.leadership: Leadership = leadership if leadership is not None else SoleLeader()
        self._advertise = None if advertise is None else check_endpoint(advertise)
        #: The endpoint clients reach this process at (set by `start`).
        self.advertised: str | None = None
        self.max_frame_bytes = max_frame_bytes
        self.metrics = metrics
        self.limits = limits or Limits()
        self.limit_counter = LimitCounter(metrics)
        self._curve = curve
        self._ctx = context or zmq.Context.instance()
        self._expire_interval_s = expire_interval_s
        self.connection_limits = connection_limits or ConnectionLimits()
        self.connections: ConnectionLimiter | None = None
        self._services: list[Service] = []
        self._scheduler = LoopScheduler(time.monotonic)
        self._wake_pipe = WakePipe()
        self._stopping = threading.Event()
        self._stopped = threading.Event()
        self.loaded = threading.Event()
        self._commit = GroupCommit(store, metrics)
        self._dispatch = Dispatcher(self._commit, self.loaded, max_frame_bytes, metrics, self._followed_leader)
        self.load_report: LoadReport | None = None
        self.failure: BaseException | None = None
        self.endpoint: str | None = None
        self.started_at = time.time()
        self._sock: zmq.Socket[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._load_thread: threading.Thread | None = None
        self.add_service(BuiltinService())

    # ------------------------------------------------------------------ extension API

    def add_handler(self, msg_type: str, message_cls: MessageClass[M], handler: Handler[M]) -> None:
        self._dispatch.add(msg_type, message_cls, handler)

    def add_service(self, service: Service) -> None:
        self._services.append(service)
        service.attach(self)

    def mark_dirty(self) -> None:
        """The store was appended to: sync before the next replies go out."""
        self._commit.mark_dirty()

    def reply_many(self, reqs: list[Request], reply: ReplyMessage) -> None:
        """The same reply to several requests (of one type), encoded once (merge completion)."""
        self._commit.reply_many(reqs, reply.to_body())

    def reply_error(self, req: Request, err: CoordinatorError) -> None:
        self._commit.reply_error(req, err)

    def push(self, identity: bytes, msg_type: str, body: dict[str, Any]) -> None:
        self._commit.push(identity, msg_type, body)

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        return self._scheduler.schedule(delay_s, callback)

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        self._scheduler.call_soon(fn)
        self._wake()

    def call_in_loop(self, fn: Callable[[], _T], timeout: float) -> _T:
        """Run ``fn`` on the loop thread and return its result (raises TimeoutError)."""
        fut: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 (handed to the caller, which re-raises it)
                fut.set_exception(exc)

        self.call_soon_threadsafe(run)
        return fut.result(timeout=timeout)

    # ------------------------------------------------------------------ life cycle

    def start(self) -> str:
        """Bind, start the loop and the load; returns the bound endpoint."""
        sock = self._ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_frame_bytes * HARD_FRAME_FACTOR)
        if self._curve is not None:
            security.configure_curve_server(sock, self._curve.public_key, self._curve.secret_key)
        configure_socket(sock, self.connection_limits)
        self.connections = ConnectionLimiter(sock, self.connection_limits, self.metrics)
        try:
            sock.bind(self.bind_address)
        except zmq.ZMQError as exc:
            self.connections.close()
            sock.close(0)
            raise OSError(f"cannot bind the coordinator to {self.bind_address}: {exc}") from exc
        self.endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.connections.bound(self.endpoint)
        self.advertised = self._advertise or self.endpoint
        self.leadership.advertise(self.advertised)
        self._sock = sock
        self._thread = threading.Thread(target=self._run, name="coordinator-loop", daemon=True)
        self._thread.start()
        self._load_thread = threading.Thread(target=self._load, name="coordinator-load", daemon=True)
        self._load_thread.start()
        return self.endpoint

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the loop (replies already queued are flushed); idempotent."""
        self._stopping.set()
        self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("coordinator loop did not stop within %.1fs", timeout)
        if self._load_thread is not None:
            self._load_thread.join(timeout)
            if self._load_thread.is_alive():
                log.error("the log replay did not end within %.1fs; stopping without it", timeout)
        for svc in self._services:
            svc.on_stop()
        self._wake_pipe.close()

    def wait(self, timeout: float) -> bool:
        """Block until the loop has ended (stop() or a fatal failure), at most
        ``timeout`` seconds; True when it has ended."""
        return self._stopped.wait(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ internals

    def _wake(self) -> None:
        self._wake_pipe.wake()

    def _load(self) -> None:
        t0 = time.monotonic()
        try:
            self.load_report = self.store.load()
        except BaseException as exc:
            log.exception("loading the coordinator state failed; stopping")
            self.failure = exc
            self._stopping.set()
            self._wake()
            return
        seconds = time.monotonic() - t0
        log.info("state loaded in %.3fs: %s", seconds, self.load_report)
        if self.metrics is not None:
            self.metrics.load_seconds.set(seconds)
        self.call_soon_threadsafe(self._on_loaded)

    def _on_loaded(self) -> None:
        self.loaded.set()
        for svc in self._services:
            svc.on_loaded()

    def _run(self) -> None:
        sock = self._sock
        assert sock is not None
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        wake_fd = self._wake_pipe.fileno
        poller.register(wake_fd, zmq.POLLIN)
        connections = self.connections
        assert connections is not None
        poller.register(connections.monitor, zmq.POLLIN)
        housekeeping = Periodic(HOUSEKEEPING_S, time.monotonic())
        expiry = Periodic(self._expire_interval_s, time.monotonic() + self._expire_interval_s)
        try:
            while not self._stopping.is_set():
                self._take_epoch()
                wait = self._scheduler.wait(TICK_S, time.monotonic())
                events = dict(poller.poll(int(wait * 1000)))
                if wake_fd in events:
                    self._wake_pipe.drain()
                if connections.monitor in events:
                    connections.on_events()
                if sock in events:
                    self._read_batch(sock)
                self._scheduler.run_calls()
                self._scheduler.run_timers()
                now = time.monotonic()
                self._scheduler.run_ticks(now, self._services)
                if self.loaded.is_set():
                    if expiry.due(now):
                        expiry.ran(now, guarded(self._expire, what="retention expiry"))
                    if housekeeping.due(now):
                        housekeeping.ran(now, guarded(self._housekeeping, what="housekeeping"))
                self._commit.commit_and_send(sock)
        except BaseException as exc:
            log.exception("coordinator loop failed; stopping")
            self.failure = exc
        finally:
            try:
                self._commit.final_flush(sock, sync=self.failure is None)
            except BaseException as exc:
                log.exception("final flush at shutdown failed")
                self.failure = self.failure or exc
            connections.close()
            sock.close(0)
            self._stopped.set()
            log.info("coordinator loop stopped")

    def _take_epoch(self) -> None:
        """Step 2: the epoch of this iteration's frames."""
        info = self.leadership.leader()
        if info is not None and info.epoch > self._commit.epoch:
            self._commit.epoch = info.epoch

    def _followed_leader(self) -> str | None:
        """The endpoint of the leader this process follows as a standby (None: it leads, loads,
        or knows no leader yet)."""
        info = self.leadership.leader()
        if not self.leadership.following() or info is None or info.endpoint == self.advertised:
            return None
        return info.endpoint

    def _read_batch(self, sock: zmq.Socket[bytes]) -> None:
        for _ in range(MAX_BATCH):
            try:
                parts = sock.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            self._dispatch.handle(parts)

    def _expire(self) -> None:
        n = self.store.expire()
        if n:
            log.info("retention: tombstoned %d idle control variables", n)
        self.mark_dirty()  # expiry may also have tombstoned empty groups

    def _housekeeping(self) -> None:
        # Starts a background compaction when dead records dominate, or switches
        # to the finished one (the switch is the only pause on this thread).
        self.store.maybe_compact()
        if self.metrics is not None:
            self.metrics.update_from_stats(self.store.stats())
            for svc in self._services:
                svc.update_metrics(self.metrics)

    def status_snapshot(self) -> CoordinatorStatus:
        """Everything /status and the ``status`` message report (loop thread only):
        the server's own state, then each service's part (``Service.add_status``)."""
        loaded = self.loaded.is_set()
        info = self.leadership.leader()
        following = self.leadership.following()
        out = CoordinatorStatus(
            endpoint=self.advertised or self.endpoint,
            role=Role.LEADER if loaded else (Role.STANDBY if following else Role.LOADING),
            leader=None if info is None else info.endpoint,
            epoch=self._commit.epoch,
            loaded=loaded,
            uptime_s=round(max(0.0, time.time() - self.started_at), 3),
            store=self.store.stats() if loaded else None,
            load=self.load_report,
            limits=attrs.asdict(self.limits),
        )
        if loaded:
            for svc in self._services:
                out = svc.add_status(out)
        return out
