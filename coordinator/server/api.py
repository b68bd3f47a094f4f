"""The coordinator server's extension API: how services plug into the loop.

The registry, control-variable, merge and region-controller services see the
server only through `ServerApi` and the store only through `ServiceStore`
(both implemented by `coordinator.server.loop` and `coordinator.store`, which
this module does not import); a service is a `Service` (its life cycle is
there, each `ServerApi` call is documented on it):

1. A handler (``add_handler``) gets the `Request` and the message its
   `MessageClass` decoded (``from_body`` validates, raising ``Invalid``), and
   returns a reply body, a typed reply (``to_body``, encoded by `route`) or
   :data:`DEFERRED` to answer later (``reply_many``, ``reply_error``); a
   :class:`~coordinator.protocol.wire.errors.CoordinatorError` it raises is the
   error reply.
2. A service that appends to ``server.store`` calls ``mark_dirty()``: the batch
   is synced before any reply or push goes out.

Everything a service touches runs on the loop thread, so services need no locks.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

import attrs

from coordinator.protocol.wire.envelope import RequestId
from coordinator.protocol.wire.errors import CoordinatorError
from coordinator.protocol.wire.protocol import MessageClass
from coordinator.protocol.wire.status import CoordinatorStatus, LeaderInfo, LoadReport, StoreStats
from coordinator.server.limits import LimitCounter, Limits

if TYPE_CHECKING:
    from coordinator.server.metrics import CoordinatorMetrics

_T = TypeVar("_T")  # the result of a call run on the loop thread


class Deferred(enum.Enum):
    """The type of :data:`DEFERRED` (an enum member, so a handler's return type can name it)."""

    DEFERRED = "deferred"


#: What a handler returns when it will answer later (``ServerApi.reply_many``/``reply_error``).
DEFERRED = Deferred.DEFERRED


@attrs.frozen
class Request:
    """Where a request came from: enough to reply to it later."""

    identity: bytes
    id: RequestId
    type: str
    received: float


class ReplyMessage(Protocol):
    """A typed reply (``coordinator/protocol/wire/protocol.py``,
    ``coordinator/protocol/region/replies.py``): `route` and the deferred
    ``reply_many`` encode it with ``to_body`` at the wire boundary."""

    def to_body(self) -> dict[str, Any]: ...


#: A reply body as it goes on the wire (JSON-encodable), or `DEFERRED`.
Body = dict[str, Any] | Literal[Deferred.DEFERRED]

#: What a handler returns: a reply body, a typed reply, or `DEFERRED`.
Reply = Body | ReplyMessage

#: The request message a handler takes.
M = TypeVar("M")


#: ``handler(req, msg)``: ``msg`` is the message its class decoded from the
#: request's body; returns a reply body or `DEFERRED`.
Handler = Callable[[Request, M], Reply]

#: A handler bound to its message class: decodes the body, then handles it
#: (what the server's handler table holds: one type per entry, whatever ``M``).
Route = Callable[[Request, Mapping[str, Any]], Body]


def route(message_cls: MessageClass[M], handler: Handler[M]) -> Route:
    """``handler`` behind the decoding of its message class, its typed reply encoded."""

    def handle(req: Request, body: Mapping[str, Any]) -> Body:
        reply = handler(req, message_cls.from_body(body))
        return reply if isinstance(reply, dict | Deferred) else reply.to_body()

    return handle


class Timer:
    """A callback the loop runs once at ``deadline`` (monotonic) unless cancelled."""

    __slots__ = ("callback", "cancelled", "deadline")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@attrs.frozen
class CurveServerConfig:
    """CurveZMQ server keys; the allow-list is enforced by the ZAP authenticator (security.py)."""

    public_key: bytes
    secret_key: bytes


class ServiceStore(Protocol):
    """The state store as services use it (`coordinator.store.state_store.StateStore`).

    The caller guarantees, for every method: it runs on the loop thread, and
    only once the store is loaded (``ServerApi.loaded``; handlers run only
    then). A write appends to the log without I/O and is durable only after the
    loop's next sync: the caller calls ``ServerApi.mark_dirty()`` and replies
    through the server, never before. A write that raises (ValueError or
    TypeError naming the bad input, ``RegionIndexMismatch``) changed nothing."""

    def put_initial_offsets(self, group: str, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Put-if-absent of control variables; returns the effective value of every key.
        `group` is a name; keys are (topic, partition) with bounded ints."""
        ...

    def get_initial_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """The control variables of `group` (a copy; empty for an unknown group)."""
        ...

    def group_count(self, group: str) -> int:
        """How many control variables `group` holds, without copying them."""
        ...

    def register_member(self, group: str, region_index: int, operator_name: str) -> list[str]:
        """Idempotent registration; raises RegionIndexMismatch for another index of a known group."""
        ...

    def unregister_member(self, group: str, operator_name: str) -> list[str]:
        """Idempotent removal; returns the remaining members."""
        ...

    def members(self, group: str) -> list[str]:
        """Registered members of `group`, sorted (empty for an unknown group)."""
        ...

    def region_index(self, group: str) -> int | None:
        """The consistent-region index `group` is registered with (None: unknown group)."""
        ...

    def groups(self) -> list[str]:
        """Every group holding state, sorted."""
        ...

    def touch(self, group: str) -> None:
        """`group` is in use (retention counts idleness from the last touch); the caller
        calls it for every message that names the group. No effect for a group without state."""
        ...

    def put_document(self, namespace: str, key: str, value: dict[str, Any] | None) -> None:
        """Store a JSON-encodable document (None deletes it)."""
        ...

    def get_document(self, namespace: str, key: str) -> dict[str, Any] | None:
        """A fresh copy of the document (None: absent)."""
        ...

    def documents(self, namespace: str) -> dict[str, dict[str, Any]]:
        """Fresh copies of every document of `namespace`, by key."""
        ...

    def stats(self) -> StoreStats:
        """Counters for status and metrics."""
        ...


class ServerStore(ServiceStore, Protocol):
    """The store as the server loop drives it (see `coordinator.store.state_store`).

    The loop guarantees: `load` once, on the load thread, before anything else
    but `stats`; every other call on the loop thread once `load` returned."""

    def load(self) -> LoadReport:
        """Replay the log; raises when the state cannot be recovered (the server stops)."""
        ...

    def sync(self) -> None:
        """One fsync for everything appended since the last one; raises LogFailed (fatal)."""
        ...

    def keepalive(self) -> None:
        """The log's sign of life when nothing was written (no-op before load); raises LogFailed (fatal)."""
        ...

    def expire(self, now: float | None = None) -> int:
        """One retention pass; raises only LogFailed."""
        ...

    def maybe_compact(self) -> bool:
        """Start a due compaction or switch to a finished one; raises only LogFailed."""
        ...


class Leadership(Protocol):
    """Who leads, as the server's log knows it (the Kafka log, ``KafkaLog``; `SoleLeader`
    for a log without standbys). Read by the loop and HTTP threads while the load thread
    writes it: each method returns one value read atomically.

    1. `advertise(endpoint)` once, by the server after its bind and before the load starts:
       the endpoint clients reach this process at (the bound one, or ``--advertise``).
    2. While the load follows a leader's log (a standby), `leader()` is that leader as its
       lease records name it (None until one named it) and `following()` is True.
    3. Once this process leads (the Kafka log: fenced), `leader()` is itself: its advertised
       endpoint and its epoch; `following()` is False.
    """

    def advertise(self, endpoint: str) -> None: ...

    def leader(self) -> LeaderInfo | None: ...

    def following(self) -> bool: ...


class SoleLeader:
    """`Leadership` of a log without standbys (the file log): this process leads, epoch 0."""

    def __init__(self) -> None:
        self._endpoint: str | None = None

    def advertise(self, endpoint: str) -> None:
        self._endpoint = endpoint

    def leader(self) -> LeaderInfo | None:
        return LeaderInfo(self._endpoint, 0)

    def following(self) -> bool:
        return False


class ServerApi(Protocol):
    """The coordinator server as a service sees it (`coordinator.server.loop.CoordinatorServer`).

    The caller guarantees: every method runs on the loop thread, except
    `call_soon_threadsafe` and `call_in_loop` (any other thread) and
    `add_handler` (during ``attach``, before the loop starts)."""

    limits: Limits  # read only
    limit_counter: LimitCounter  # counts and builds LIMIT_EXCEEDED errors
    metrics: CoordinatorMetrics | None  # None when metrics are off
    loaded: threading.Event  # set by the loop once the store is loaded

    @property
    def store(self) -> ServiceStore: ...

    def add_handler(self, msg_type: str, message_cls: MessageClass[M], handler: Handler[M]) -> None:
        """Route requests of `msg_type` (one handler per type, else ValueError): each
        body is decoded by `message_cls` and handed to `handler`."""
        ...

    def mark_dirty(self) -> None:
        """The caller appended to the store: sync before the next replies go out."""
        ...

    def reply_many(self, reqs: list[Request], reply: ReplyMessage) -> None:
        """Answer DEFERRED requests of one type once each, the same reply encoded once."""
        ...

    def reply_error(self, req: Request, err: CoordinatorError) -> None:
        """Answer a DEFERRED request once with an error reply."""
        ...

    def push(self, identity: bytes, msg_type: str, body: dict[str, Any]) -> None:
        """An unsolicited message (id null) to the client `identity` of an earlier request."""
        ...

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        """Run `callback` on the loop thread after `delay_s` (>= 0) unless cancelled."""
        ...

    def call_soon_threadsafe(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the loop thread soon (from any thread)."""
        ...

    def call_in_loop(self, fn: Callable[[], _T], timeout: float) -> _T:
        """Run `fn` on the loop thread and return its result; TimeoutError after `timeout`.
        Never called from the loop thread itself (it would wait for itself)."""
        ...

    def status_snapshot(self) -> CoordinatorStatus:
        """What the ``status`` reply and HTTP ``/status`` report (loop thread only)."""
        ...


class Service:
    """A service plugged into the loop with ``server.add_service(svc)``; a
    subclass overrides the hooks it needs, the others do nothing.

    1. ``attach(server)`` once, before the loop starts: the service keeps the
       server (`server`; a call before ``attach`` is a programming error,
       raised, not an ``assert``, which ``python -O`` removes) and registers
       its handlers.
    2. The loop then calls the hooks, each on the loop thread: ``on_loaded()``
       once the store is loaded; ``on_tick(now)`` every iteration (at least
       every ``TICK_S``; a hook that raises is logged and backed off);
       ``add_status(status)`` for the ``status`` reply (once loaded): returns
       the snapshot with the service's part filled in (``attrs.evolve``);
       ``update_metrics(metrics)`` at every metrics refresh.
    3. ``on_stop()`` once, by ``stop()`` after the loop has ended: the service
       ends the threads it owns (bounded)."""

    _server: ServerApi | None = None

    @property
    def server(self) -> ServerApi:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__}: attach() the service to a server first")
        return self._server

    def attach(self, server: ServerApi) -> None:
        self._server = server

    def on_loaded(self) -> None: ...

    def on_tick(self, now: float) -> None: ...

    def add_status(self, status: CoordinatorStatus) -> CoordinatorStatus:
        return status

    def update_metrics(self, metrics: CoordinatorMetrics) -> None: ...

    def on_stop(self) -> None:
        """The server stopped (its loop has ended): end the threads the service owns, bounded."""
