"""Client of the coordinator: the only way the consumer side talks to it.

Each operation is one request message of ``coordinator/protocol/wire/protocol.py``
and its reply, decoded and validated by the reply's class. The
:class:`~coordinator.protocol.wire.request_transport.RequestTransport` carries it:
per-thread sockets, tries and re-sends of the SAME request (same id), endpoint
failover and redirects, the epoch fence, and the errors it raises (its module
docstring numbers the steps; docs/protocol.md has every message).

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
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import attrs
import zmq

from coordinator.protocol.common.endpoints import EndpointRing, EpochFence
from coordinator.protocol.region.messages import RegionStatusRequest
from coordinator.protocol.region.status import RegionReport, RegionsReport, RegionStatus
from coordinator.protocol.wire import protocol
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable, LoadInProgress, NotLeader
from coordinator.protocol.wire.fields import MAX_TIMEOUT_MS, check_offsets
from coordinator.protocol.wire.request_transport import Body, NoReply, RequestTransport
from coordinator.protocol.wire.status import CoordinatorStatus

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


#: The reply a call decodes.
R = TypeVar("R")


class _Request(Protocol):
    """A request message (``coordinator/protocol/wire/protocol.py``)."""

    TYPE: ClassVar[str]

    def to_body(self) -> dict[str, Any]: ...


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
        ring = EndpointRing(endpoint)  # ValueError for a malformed list
        _check_timeout("timeout", timeout)
        _check_timeout("try_timeout", try_timeout)
        if (curve_server_key is None) != (curve_keypair is None):
            raise ValueError("CURVE needs both curve_server_key and curve_keypair (public, secret)")
        self.endpoint = endpoint
        self.timeout = timeout
        self.try_timeout = try_timeout
        self._transport = RequestTransport(
            ring,
            endpoint,
            try_timeout=try_timeout,
            curve_server_key=curve_server_key,
            curve_keypair=curve_keypair,
            context=context or zmq.Context.instance(),
        )

    @property
    def fence(self) -> EpochFence:
        """The leader epochs this client has seen: ``highest``, and ``dropped``, the frames it
        dropped for an epoch lower than one seen before (the transport's step 6)."""
        return self._transport.fence

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ requests

    def request(self, msg_type: str, body: Body, timeout: float | None = None) -> dict[str, Any]:
        """Send one request and return the reply body; retried as the transport's steps say.

        ``body`` may be a function of the remaining seconds (used by merges to
        re-send with the remaining wait). Raises CoordinatorError subclasses
        for error replies and CoordinatorUnavailable after the deadline.
        """
        total = self.timeout if timeout is None else _check_timeout("timeout", timeout)
        return self._transport.request(msg_type, body, total)

    def probe(self, timeout: float) -> Probe:
        """One ping to the first endpoint, one try of at most ``timeout`` seconds, no retry and
        no redirect followed: what that endpoint is (``crkafka status``). Other error replies
        raise their CoordinatorError."""
        wait_s = _check_timeout("timeout", timeout)
        endpoint = self._transport.first_endpoint
        fence = self._transport.fence
        try:
            self._transport.try_once(protocol.Ping.TYPE, protocol.Ping().to_body(), wait_s)
        except NoReply:
            return Probe(endpoint, EndpointRole.UNREACHABLE, None, None)
        except NotLeader as redirect:
            return Probe(endpoint, EndpointRole.STANDBY, redirect.leader, fence.highest)
        except LoadInProgress:
            return Probe(endpoint, EndpointRole.LOADING, None, fence.highest)
        return Probe(endpoint, EndpointRole.LEADER, endpoint, fence.highest)

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
