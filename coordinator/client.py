"""Client of the coordinator: the only way the consumer side talks to it.

Protocol (docs/protocol.md has every message):

1. Each calling thread gets its own DEALER socket (thread-local), so a merge
   blocking in one thread never blocks another thread's request. Replies are
   matched by request id; a reply with another id (a stale answer to an
   earlier, abandoned request) is dropped. The sockets of threads that have
   ended are closed when another thread opens its socket.
2. A request is sent and its reply awaited for at most ``try_timeout``
   seconds. No reply -> the connection is presumed lost: the socket is closed
   and recreated (a fresh connection and identity) and the SAME request (same
   id) is re-sent, with exponential backoff and jitter (tenacity).
3. A ``LOAD_IN_PROGRESS`` reply is retried the same way (the coordinator is
   replaying its log after a restart), and so is ``UNAVAILABLE`` (the coordinator
   stops: its log refused the write, e.g. a deposed leader fenced by the new one).
4. Given several endpoints (a leader on Kafka and its standbys,
   ``coordinator/protocol/common/endpoints.py``), a try without a reply or
   answered ``LOAD_IN_PROGRESS`` or ``UNAVAILABLE`` moves the calling thread to the next endpoint
   (a fresh socket) before the request is re-sent.
5. A ``NOT_LEADER`` reply (a standby) names the leader's endpoint: checked like a
   configured one, it becomes the calling thread's endpoint at once (added to the
   list when it is not there, bounded: ``EndpointRing.redirect``) and the same
   request (same id) is re-sent there after ``BACKOFF_INITIAL_S``. A reply naming
   no usable endpoint counts as ``LOAD_IN_PROGRESS``.
6. Every frame carries its leader's epoch; one with a lower epoch than the highest
   this client has seen (a deposed leader's, a lagging standby's redirect) is
   dropped, logged and counted (``EndpointRing.fence``: ``client.fence.dropped``), as if
   it had not arrived.
7. When the caller's deadline (``timeout``) passes without a usable reply,
   :class:`~coordinator.protocol.wire.errors.CoordinatorUnavailable` is raised, naming the
   endpoint and what was tried. Any other error reply raises the
   :class:`~coordinator.protocol.wire.errors.CoordinatorError` subclass of its code (``.code``).

Retries are safe because every request is idempotent under re-sending:
register (same name twice = once), put_initial_offsets (put-if-absent),
get/members/status/ping (reads), merge_checkpoint (deduplicated by operator
name; a retry after completion gets the same merged map), retire_checkpoint
(a watermark). set_reset_pending is a get-and-set; the server remembers the
answer per request id, so a re-send of the same call returns the ORIGINAL
answer (a retry never makes the first setter believe someone else set it).
That memory is the server's own: a re-send to another coordinator after a
failover (step 4) is answered as a new call.

``merge_checkpoint`` waits up to its own ``timeout`` (the server answers
``TIMEOUT`` then); while it waits, the contribution is re-sent every
``try_timeout`` with the remaining time, so a coordinator restart during a
merge does not lose it.

Thread safety: every method may be called from any thread concurrently.
``close()`` must be called once, after the other threads stopped using the
client (ZeroMQ sockets may not be closed while another thread polls them).
"""

from __future__ import annotations

import enum
import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import attrs
import tenacity
import zmq

from coordinator.protocol.common.endpoints import EndpointRing, EpochFence
from coordinator.protocol.region.messages import RegionStatusRequest
from coordinator.protocol.region.status import RegionReport, RegionsReport, RegionStatus
from coordinator.protocol.wire import envelope, protocol
from coordinator.protocol.wire.errors import (
    CoordinatorError,
    CoordinatorUnavailable,
    LoadInProgress,
    NotLeader,
    error_for_code,
)
from coordinator.protocol.wire.fields import MAX_TIMEOUT_MS, check_offsets
from coordinator.protocol.wire.status import CoordinatorStatus

log = logging.getLogger(__name__)

#: Wait for one reply before presuming the connection lost and re-sending;
#: prevents a request from hanging on a coordinator that died or restarted.
TRY_TIMEOUT_S = 2.0
#: Extra time a merge waits beyond its own timeout for the server's TIMEOUT
#: reply to travel back, so the server's answer wins over the client's deadline.
MERGE_GRACE_S = 1.0
#: Entries per put_initial_offsets frame, so a huge map stays under the server's
#: frame limit (about 30 bytes per entry -> ~1.5 MiB per frame).
PUT_CHUNK = 50_000
#: Longest wait of one call (``timeout``, ``try_timeout``): a timeout must be a
#: finite number of seconds up to this, so no caller can turn a request into a
#: wait for ever (an infinite or NaN deadline never passes). A day is far above
#: any caller's need (the longest, a merge, waits at most ``MAX_TIMEOUT_MS``).
MAX_TIMEOUT_S = 86_400.0
#: Backoff between tries (LOAD_IN_PROGRESS or no reply): exponential with jitter,
#: so clients retrying against a restarting coordinator do not hammer it in step.
BACKOFF_INITIAL_S = 0.02
BACKOFF_MAX_S = 1.0
BACKOFF_JITTER_S = 0.05


#: The reply a call decodes.
R = TypeVar("R")


class _Request(Protocol):
    """A request message (``coordinator/protocol/wire/protocol.py``)."""

    TYPE: ClassVar[str]

    def to_body(self) -> dict[str, Any]: ...


class _NoReply(Exception):
    pass


class EndpointRole(str, enum.Enum):
    """What one endpoint answered a `CoordinatorClient.probe` with."""

    #: It served the ping: the leader.
    LEADER = "leader"
    #: NOT_LEADER: a standby that knows the leader.
    STANDBY = "standby"
    #: LOAD_IN_PROGRESS: replaying its log, or a standby that knows no leader yet.
    LOADING = "loading"
    #: No reply within the probe's bound.
    UNREACHABLE = "unreachable"


@attrs.frozen
class Probe:
    """One endpoint's answer to a probe: its role, the leader it named (a standby's redirect,
    or the endpoint itself when it leads) and the epoch its reply carried (None: no reply)."""

    endpoint: str
    role: EndpointRole
    leader: str | None
    epoch: int | None


class _ThreadSocket(threading.local):
    """The calling thread's socket (None until its first request, or after a lost connection)."""

    sock: zmq.Socket[bytes] | None = None
    #: The endpoint ``sock`` is connected to.
    endpoint: str = ""


def _check_timeout(name: str, value: float) -> float:
    """``value`` as a timeout in (0, MAX_TIMEOUT_S] seconds, else ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_TIMEOUT_S:
        raise ValueError(f"{name} must be a number of seconds in (0, {MAX_TIMEOUT_S:g}], got {value!r}")
    return float(value)


class CoordinatorClient:
    def __init__(
        self,
        endpoint: str,
        *,
        timeout: float = 10.0,
        curve_server_key: bytes | None = None,
        curve_keypair: tuple[bytes, bytes] | None = None,
        try_timeout: float = TRY_TIMEOUT_S,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
    ) -> None:
        self._ring = EndpointRing(endpoint)  # ValueError for a malformed list
        _check_timeout("timeout", timeout)
        _check_timeout("try_timeout", try_timeout)
        if (curve_server_key is None) != (curve_keypair is None):
            raise ValueError("CURVE needs both curve_server_key and curve_keypair (public, secret)")
        self.endpoint = endpoint
        self.timeout = timeout
        self.try_timeout = try_timeout
        self._curve_server_key = curve_server_key
        self._curve_keypair = curve_keypair
        self._ctx = context or zmq.Context.instance()
        self._local = _ThreadSocket()
        self._lock = threading.Lock()
        self._sockets: dict[zmq.Socket[bytes], threading.Thread] = {}  # socket -> owning thread
        self._closed = False
        self._prefix = f"{os.getpid():x}-{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count(1)

    @property
    def fence(self) -> EpochFence:
        """The leader epochs this client has seen: ``highest``, and ``dropped``, the frames it
        dropped for an epoch lower than one seen before (step 6)."""
        return self._ring.fence

    # ------------------------------------------------------------------ sockets
    def _socket(self) -> zmq.Socket[bytes]:
        sock = self._local.sock
        if sock is not None:
            return sock
        if self._closed:
            raise RuntimeError("CoordinatorClient is closed")
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        if self._curve_keypair is not None:
            sock.curve_publickey, sock.curve_secretkey = self._curve_keypair
            sock.curve_serverkey = self._curve_server_key
        endpoint = self._ring.current
        sock.connect(endpoint)
        with self._lock:
            # Sockets of threads that have ended are closed here, so a client used
            # from many short-lived threads does not accumulate file descriptors.
            dead = [s for s, t in self._sockets.items() if not t.is_alive()]
            for s in dead:
                del self._sockets[s]
            self._sockets[sock] = threading.current_thread()
        for s in dead:
            s.close(0)
        self._local.sock = sock
        self._local.endpoint = endpoint
        return sock

    def _drop_socket(self) -> None:
        sock = self._local.sock
        self._local.sock = None
        if sock is not None:
            with self._lock:
                self._sockets.pop(sock, None)
            sock.close(0)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._sockets = list(self._sockets), {}
        for s in socks:
            s.close(0)

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def request(
        self,
        msg_type: str,
        body: Mapping[str, Any] | Callable[[float], Mapping[str, Any]],
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one request and return the reply body; retries as described above.

        ``body`` may be a function of the remaining seconds (used by merges to
        re-send with the remaining wait). Raises CoordinatorError subclasses
        for error replies and CoordinatorUnavailable after the deadline.
        """
        total = self.timeout if timeout is None else _check_timeout("timeout", timeout)
        deadline = time.monotonic() + total
        rid = f"{self._prefix}-{next(self._ids)}"
        tries = 0

        def remaining() -> float:
            return deadline - time.monotonic()

        backoff = tenacity.wait_exponential_jitter(
            multiplier=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S, jitter=BACKOFF_JITTER_S
        )

        def wait(state: tenacity.RetryCallState) -> float:
            failed = state.outcome.exception() if state.outcome is not None else None
            return BACKOFF_INITIAL_S if isinstance(failed, NotLeader) else float(backoff(state))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((_NoReply, LoadInProgress, NotLeader)),
            wait=wait,
            stop=tenacity.stop_before_delay(total),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    tries += 1
                    left = remaining()
                    if left <= 0:
                        raise _NoReply()
                    payload = body(left) if callable(body) else body
                    frame = envelope.encode(msg_type, payload, rid)
                    try:
                        return self._try(frame, rid, min(self.try_timeout, left))
                    except NotLeader as redirect:
                        if redirect.leader is not None:  # always (error_for_code), but typed optional
                            self._redirect(redirect.leader)
                        raise
                    except (_NoReply, LoadInProgress):
                        self._move_on()
                        raise
        except _NoReply:
            raise CoordinatorUnavailable(
                f"no reply from the coordinator at {self.endpoint} to {msg_type!r} within {total:.1f}s "
                f"({tries} tries): is cr-coordinator running there, and if it uses CURVE, is this "
                f"client's public key in its allow-list?",
                endpoint=self.endpoint,
            ) from None
        except (LoadInProgress, NotLeader):
            raise CoordinatorUnavailable(
                f"the coordinator at {self.endpoint} was still loading its state after {total:.1f}s "
                f"({tries} tries); retry later or raise the client timeout",
                endpoint=self.endpoint,
                loading=True,
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _move_on(self) -> None:
        """Step 4: the calling thread's endpoint did not serve; with several, the next one."""
        if self._ring.several:
            self._ring.move_from(self._local.endpoint)
            self._drop_socket()

    def _redirect(self, leader: str) -> None:
        """Step 5: talk to ``leader`` from now on (a fresh socket unless connected to it)."""
        if self._local.endpoint != leader or self._local.sock is None:
            log.info("the coordinator at %s is a standby; the leader is %s", self._local.endpoint, leader)
        self._ring.redirect(leader)
        if self._local.endpoint != leader:
            self._drop_socket()

    def _try(self, frame: bytes, rid: str, wait_s: float) -> dict[str, Any]:
        sock = self._socket()
        # IMMEDIATE: send blocks (up to the try's wait) until a connection is up,
        # so a down coordinator or a refused CURVE handshake ends in _NoReply.
        sock.setsockopt(zmq.SNDTIMEO, max(1, int(wait_s * 1000)))
        end = time.monotonic() + wait_s
        try:
            sock.send(frame)
        except zmq.Again:
            self._drop_socket()
            raise _NoReply() from None
        while True:
            left = end - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                if time.monotonic() < end:
                    continue
                self._drop_socket()
                raise _NoReply()
            raw = sock.recv()
            try:
                env = envelope.decode(raw, envelope.MAX_REPLY_DEPTH, from_server=True)
            except envelope.BadEnvelope as bad:
                log.warning("dropped an undecodable frame from the coordinator: %s", bad)
                continue
            if not self._ring.fence.admit(env.epoch or 0, f"a {env.type!r} from {self._local.endpoint}"):
                continue  # step 6
            if env.type == envelope.ERROR_TYPE:
                # id null: the server could not read our id (e.g. TOO_LARGE); one
                # request is outstanding per socket, so it is ours.
                if env.id not in (rid, None):
                    continue
                raise error_for_code(str(env.body.get("code")), str(env.body.get("message")), env.body)
            if env.id != rid:
                # a stale reply, or a push (id null): pushes go to the member's control
                # channel (cr_consumer/runtime/member/control.py), never to this client
                log.debug("dropped a stale reply or a push (id %r, waiting for %r)", env.id, rid)
                continue
            return env.body

    def probe(self, timeout: float) -> Probe:
        """One ping to the first endpoint, one try of at most ``timeout`` seconds, no retry and
        no redirect followed: what that endpoint is (``crkafka status``). Other error replies
        raise their CoordinatorError."""
        wait_s = _check_timeout("timeout", timeout)
        endpoint = self._ring.configured[0]
        rid = f"{self._prefix}-{next(self._ids)}"
        frame = envelope.encode(protocol.Ping.TYPE, protocol.Ping().to_body(), rid)
        try:
            self._try(frame, rid, wait_s)
        except _NoReply:
            return Probe(endpoint, EndpointRole.UNREACHABLE, None, None)
        except NotLeader as redirect:
            return Probe(endpoint, EndpointRole.STANDBY, redirect.leader, self._ring.fence.highest)
        except LoadInProgress:
            return Probe(endpoint, EndpointRole.LOADING, None, self._ring.fence.highest)
        return Probe(endpoint, EndpointRole.LEADER, endpoint, self._ring.fence.highest)

    # ------------------------------------------------------------------ operations

    def _call(self, msg: _Request, reply_cls: protocol.MessageClass[R], timeout: float | None = None) -> R:
        """Send ``msg`` and decode its reply with ``reply_cls`` (Invalid naming the
        field when the reply does not validate)."""
        return reply_cls.from_body(self.request(msg.TYPE, msg.to_body(), timeout))

    def ping(self, timeout: float | None = None) -> protocol.PingReply:
        return self._call(protocol.Ping(), protocol.PingReply, timeout)

    def status(self, timeout: float | None = None) -> CoordinatorStatus:
        """The coordinator's status (``coordinator/protocol/wire/status.py``), validated."""
        return self._call(protocol.Status(), CoordinatorStatus, timeout)

    def region_status(self, region: str, timeout: float | None = None) -> RegionReport:
        """One region's status and the controller's recent events about it
        (NOT_REGISTERED for a region the controller does not know), validated."""
        return self._call(RegionStatusRequest(region), RegionReport, timeout)

    def regions_status(self, timeout: float | None = None) -> dict[str, RegionStatus]:
        """Every region's status, by name, validated."""
        return self._call(RegionStatusRequest(None), RegionsReport, timeout).regions

    def register(self, group_id: str, region_index: int, operator_name: str) -> list[str]:
        return self._call(protocol.Register(group_id, region_index, operator_name), protocol.MembersReply).members

    def unregister(self, group_id: str, operator_name: str) -> list[str]:
        return self._call(protocol.Unregister(group_id, operator_name), protocol.MembersReply).members

    def members(self, group_id: str, operator: str | None = None, seq: int | None = None) -> list[str]:
        """Registered names. ``operator``: the caller's own name (renews its lease);
        ``seq``: a checkpoint id, answered with the list fixed for it (see registry.py)."""
        return self._call(protocol.Members(group_id, operator, seq), protocol.MembersReply).members

    def put_initial_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Put-if-absent each entry; returns the effective value of every given entry."""
        # Checked whole before the first chunk goes: a bad entry in a later chunk
        # must not leave the earlier chunks stored.
        items = list(check_offsets(offsets).items())
        out: dict[tuple[str, int], int] = {}
        for i in range(0, max(len(items), 1), PUT_CHUNK):
            msg = protocol.PutInitialOffsets(group_id, dict(items[i : i + PUT_CHUNK]))
            out.update(self._call(msg, protocol.OffsetsReply).offsets)
        return out

    def get_initial_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return self._call(protocol.GetInitialOffsets(group_id), protocol.OffsetsReply).offsets

    def merge_checkpoint(
        self,
        group_id: str,
        seq: int,
        attempt: int,
        n_contributors: int,
        operator_name: str,
        offsets: Mapping[tuple[str, int], int],
        timeout: float,
    ) -> dict[tuple[str, int], int]:
        """Contribute this member's offsets; blocks until the merged map arrives.

        Raises MergeTimeout (code TIMEOUT) when the other contributions did not
        arrive within ``timeout`` seconds, MergeRetired when the checkpoint was retired.
        """
        if not 0 < timeout <= MAX_TIMEOUT_MS / 1000:
            raise ValueError(f"merge timeout must be in (0, {MAX_TIMEOUT_MS / 1000:g}] seconds, got {timeout}")
        base = protocol.MergeCheckpoint(
            group_id, seq, attempt, n_contributors, operator_name, dict(offsets), 1
        ).to_body()
        merge_deadline = time.monotonic() + timeout

        def body(_left: float) -> dict[str, Any]:
            ms = min(MAX_TIMEOUT_MS, max(1, int((merge_deadline - time.monotonic()) * 1000)))
            return {**base, "timeout_ms": ms}

        reply = self.request(protocol.MergeCheckpoint.TYPE, body, timeout + MERGE_GRACE_S)
        return protocol.MergeReply.from_body(reply).offsets

    def retire_checkpoint(self, group_id: str, seq: int) -> int:
        """Drop every merge of the group with sequence id <= seq; returns how many."""
        return self._call(protocol.RetireCheckpoint(group_id, seq), protocol.RetireReply).dropped

    def set_reset_pending(self, group_id: str, value: bool) -> bool:
        """Atomically set the group's reset-pending flag; returns the previous value."""
        return self._call(protocol.SetResetPending(group_id, value), protocol.ResetPendingReply).previous


__all__ = ["CoordinatorClient", "CoordinatorError", "CoordinatorUnavailable", "EndpointRole", "Probe"]
