"""A member's control channel to the region controller (member side of docs/region.md).

One I/O thread owns one ZeroMQ DEALER socket (ZeroMQ sockets are not
thread-safe, so no other thread touches it). Its routing id is fixed,
``<member>/<incarnation>``, so that after a reconnect (a coordinator restart)
commands pushed to that identity still arrive, and a restarted member process
(new incarnation) is never confused with its predecessor.

Every request is one of the protocol's message classes
(``coordinator/protocol/region/messages.py``), encoded by its ``to_body``;
every answer is decoded into its reply class
(``coordinator/protocol/region/replies.py``; an invalid one is logged and
dropped, as if lost).

The I/O thread loop:

1. Until joined: send ``region_join`` (re-sent every ``JOIN_RETRY_S`` without
   an answer; ``LOAD_IN_PROGRESS`` is retried the same way). What the answers
   to it mean (joined, a predecessor to evict, a refused name, a fatal
   refusal) is ``join_state.py``'s: the channel feeds it every answer.
2. Joined: send ``region_heartbeat`` every ``HEARTBEAT_S``, with ``report()``
   (the member's Kafka group state) as its ``kafka`` field.
3. Send what other threads queued (acks, reset requests, triggers) at once: they
   write to a queue and wake the loop through a pipe. While not joined (the
   coordinator restarted, or went silent for ``LOST_AFTER_S``), a reset request
   is held, not dropped, and sent as soon as the member is joined again (a
   rejoin of the same incarnation does not reset the region by itself; a
   dropped forced request left the source in CR_RESET_PENDING). Acks are held
   the same way (bounded, oldest dropped; :class:`RequestBook`): a command can arrive
   just before the join reply that makes the channel count itself joined, and
   a dropped answer to it failed that phase only by its timeout; the
   controller ignores answers that are stale by then.
   ``trigger_reply`` waits for the answer, at most its timeout; not joined,
   it is answered None at once.
4. Pushed ``region_command`` messages are decoded and validated
   (``coordinator/protocol/region/commands.py``; an invalid one is logged and dropped)
   and go to ``on_command`` (the member's control thread queue) as typed
   commands, in arrival order; a reset with ``rejoin`` first calls
   ``on_rejoin_hint`` (the source's consumer rejoins its group).
5. A ``NOT_REGISTERED`` answer (the coordinator restarted and forgot us) or no
   answer to anything for ``LOST_AFTER_S``: back to step 1.
6. Given several endpoints (a coordinator on Kafka with standbys,
   ``coordinator/protocol/common/endpoints.py``): an endpoint silent for
   ``MOVE_ON_S``, or answering only ``LOAD_IN_PROGRESS`` for ``LOST_AFTER_S``, is left
   for the next one: a fresh socket (same routing id) and back to step 1 there.
   What was in flight on the old socket is lost, as at a coordinator restart
   (held requests are kept, step 3).
7. A ``NOT_LEADER`` answer (a standby) names the leader's endpoint: checked like a
   configured endpoint (``errors.leader_of``; a bad one counts as ``LOAD_IN_PROGRESS``),
   it is added to the list when it is not there (bounded, ``EndpointRing.redirect``) and
   the channel moves there at once, as in step 6 (back to step 1 there: the join is
   re-sent with a new request id, the requests held meanwhile after it).
8. Every frame carries its leader's epoch. One with an epoch lower than the highest the
   channel has seen (``EndpointRing.fence``) is dropped before it is read further, logged
   and counted (``dropped_frames``): a command a deposed leader pushed before it was
   fenced, or its late answer, never reaches the member; a dropped frame does not count
   as served (step 6).
Other error answers are logged (an INVALID join is fatal: ``failure`` is set;
``join_state.py``, step 3).
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import zmq

from coordinator.protocol.common.endpoints import EndpointRing
from coordinator.protocol.common.osutil import WakePipe
from coordinator.protocol.region.commands import (
    COMMAND_TYPE,
    CommandKind,
    RegionCommand,
    Reset,
    ResetToInitial,
    decode_command,
)
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.messages import (
    MemberRequest,
    RegionAck,
    RegionHeartbeat,
    RegionJoin,
    RegionLeave,
    RegionResetRequest,
    RegionTrigger,
)
from coordinator.protocol.region.replies import (
    ErrorReply,
    Predecessor,
    RegionJoinReply,
    RegionLeaveReply,
    RegionPhase,
    RegionPhaseReply,
    RegionReply,
    RegionTriggerReply,
    TriggerAnswer,
    decode_reply,
)
from coordinator.protocol.region.transactions import Transactions
from coordinator.protocol.wire import envelope, fields
from coordinator.protocol.wire.errors import ErrorCode, Invalid, leader_of
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.member.join_state import JoinState

log = logging.getLogger(__name__)

#: Heartbeat interval: how the controller tells a silent (killed, partitioned)
#: member from a live one; its member_timeout_s must be several of these.
HEARTBEAT_S = 0.5
#: Reconnect interval of the DEALER socket while the coordinator is down: bounds
#: how long after a coordinator restart the member notices it.
RECONNECT_IVL_MS = 100
#: Re-send a join that got no answer (coordinator down or restarting).
JOIN_RETRY_S = 0.5
#: No answer at all for this long: presume the coordinator lost us and join again
#: (its restart may have dropped our queued messages).
LOST_AFTER_S = 3.0
#: Given several endpoints, one silent for this long is left for the next (step 6): three
#: heartbeats without any answer. Bounds how long after a leader's death a member waits before
#: it tries the standby; a leader paused for longer costs the member a rejoin. One that answers
#: only LOAD_IN_PROGRESS (a standby taking over, or one that is not the leader) is left after
#: LOST_AFTER_S: longer, so that a member that reached a standby during its takeover does not
#: go back to the dead leader first.
MOVE_ON_S = 1.5
#: Bound on the I/O thread's exit at stop(), so a wedged socket cannot hang the
#: member's shutdown.
STOP_JOIN_S = 5.0
#: Bound on waiting for the answer to a graceful leave (the coordinator may be down).
LEAVE_TIMEOUT_S = 3.0
#: Bound on the process thread's wait for the answer to a trigger: a coordinator
#: that does not answer must not stall the records' flow (the source then goes
#: on without waiting for a drain).
TRIGGER_ANSWER_S = 2.0


#: Bound on the acks held while not joined (sent once joined; oldest dropped).
HELD_KEPT = 100
#: Bound on the answers awaited at once by other threads (the trigger): a lost
#: answer's waiter is dropped, oldest first.
WAITERS_KEPT = 64
#: Bound on the request types remembered for their answers; past it the oldest
#: half is forgotten (answers lost in a coordinator restart never come).
PENDING_KEPT = 1000
#: Longest member-name prefix of a request id (ids are bounded: envelope.MAX_ID_LEN).
ID_PREFIX_CHARS = 64

#: An answer as a waiter gets it: the decoded reply, or None (no usable answer).
Answer = RegionReply | ErrorReply | None


class Waiter:
    """One request whose answer a thread waits for: the I/O thread puts the answer
    (or None) and sets the event."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reply: Answer = None

    def answer(self, reply: Answer) -> None:
        self.reply = reply
        self.done.set()


class RequestBook:
    """The channel's bookkeeping of its requests, without I/O (the I/O thread's
    only; not thread-safe):

    1. Every request gets an id (``<member>-<n>``, bounded by
       ``envelope.MAX_ID_LEN``) and its type is remembered until its answer
       comes (at most ``PENDING_KEPT``; answers lost in a coordinator restart
       are forgotten oldest first).
    2. A request whose answer a thread waits for (the trigger) registers a
       :class:`Waiter` under its request id; the decoded answer (or None) is
       handed to it. At most ``WAITERS_KEPT`` wait at once: the oldest is
       answered None (its asker timed out already).
    3. While not joined, :meth:`hold` decides what happens to a queued request
       (module docstring, step 3: a reset request is held, one, a forced one
       never replaced by a plain one; acks are held, at most ``HELD_KEPT``,
       oldest dropped; anything else is dropped, its waiter answered None).
       Once joined again, :meth:`take_held` hands back the held acks, then the
       held reset request, to be sent.
    """

    def __init__(self, member: str) -> None:
        self.member = member
        self._ids = itertools.count(1)
        self._pending: dict[str, str] = {}  # request id -> type
        self._waiters: dict[str, Waiter] = {}
        self._held_reset: RegionResetRequest | None = None
        self._held: collections.deque[RegionAck] = collections.deque(maxlen=HELD_KEPT)

    def new_id(self, msg_type: str) -> str:
        """Step 1: the id of a request about to be sent."""
        rid = f"{self.member[:ID_PREFIX_CHARS]}-{next(self._ids)}"
        self._pending[rid] = msg_type
        if len(self._pending) > PENDING_KEPT:
            for key in list(self._pending)[: PENDING_KEPT // 2]:
                self._pending.pop(key, None)
        return rid

    def await_answer(self, rid: str, waiter: Waiter) -> None:
        """Step 2: ``waiter`` gets the answer to request ``rid``."""
        self._waiters[rid] = waiter
        while len(self._waiters) > WAITERS_KEPT:  # answers lost: the askers timed out already
            self._waiters.pop(next(iter(self._waiters))).answer(None)

    def answered(self, rid: str | int | None) -> tuple[str | None, Waiter | None]:
        """The type of the request an answer with id ``rid`` is for, and its waiter
        (None, None for a push or an answer whose request was forgotten)."""
        if rid is None or not isinstance(rid, str):
            return None, None
        return self._pending.pop(rid, None), self._waiters.pop(rid, None)

    def hold(self, message: MemberRequest, waiter: Waiter | None) -> None:
        """Step 3: a request queued while not joined."""
        if isinstance(message, RegionResetRequest):
            held = self._held_reset
            if held is None or message.force or not held.force:
                self._held_reset = message  # a forced request is never replaced by a plain one
            log.info("%s: not joined; reset request held until joined again", self.member)
        elif isinstance(message, RegionAck):
            self._held.append(message)
            log.info("%s: not joined; %s answer held until joined", self.member, message.command)
        else:
            if waiter is not None:
                waiter.answer(None)
            log.info("%s: not joined; dropped %s", self.member, message.TYPE)

    def take_held(self) -> list[MemberRequest]:
        """Step 3, joined again: the held acks (oldest first), then the held reset request."""
        out: list[MemberRequest] = list(self._held)
        self._held.clear()
        if self._held_reset is not None:
            log.info("%s: joined again; sending the reset request held meanwhile", self.member)
            out.append(self._held_reset)
            self._held_reset = None
        return out

    def abandon(self) -> None:
        """The I/O thread ends: every waiter is answered None."""
        for waiter in self._waiters.values():
            waiter.answer(None)
        self._waiters.clear()


@dataclass
class _IoClock:
    """The I/O thread's timestamps (monotonic) and its count of connections."""

    last_heard: float
    #: The last answer or push that was not ``LOAD_IN_PROGRESS`` (step 6).
    last_served: float = 0.0
    join_sent: float = 0.0
    last_hb: float = 0.0
    connects: int = 0


class ControlChannel:
    """The member's end of the control channel (see the module docstring).

    The member's standing (``joined``, ``failure``, ``region_phase()``, the
    answer to a leave: read by any thread) is its ``JoinState``, written by the
    I/O thread as the answers arrive (``join_state.py`` says which thread
    writes what). The outbox and the wake-up pipe are any thread's; everything
    else is the I/O thread's only (``_book``) or set before :meth:`start`.
    """

    def __init__(
        self,
        endpoint: str,
        region: str,
        member: str,
        incarnation: str,
        region_config: RegionConfig,
        on_command: Callable[[RegionCommand], None],
        *,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        curve: tuple[bytes, bytes, bytes] | None = None,
        report: Callable[[], KafkaReport | None] | None = None,
        dead_letters: Callable[[], int | None] | None = None,
        on_predecessor: Callable[[Predecessor], None] | None = None,
        on_rejoin_hint: Callable[[], object] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._ring = EndpointRing(endpoint)  # ValueError for a malformed list
        self._connected_to = self._ring.current  # the I/O thread's socket's endpoint
        self.region = region
        self.member = member
        self.incarnation = incarnation
        self.region_config = region_config
        self.on_command = fault_points.lossy(on_command, member)  # itself unless a drill arms receive-* points
        self._ctx = context or zmq.Context.instance()
        self._curve = curve  # (server public, client public, client secret)
        self._report = report
        self._dead_letters = dead_letters
        self._on_rejoin_hint = on_rejoin_hint
        self._outbox: queue.SimpleQueue[tuple[MemberRequest, Waiter | None]] = queue.SimpleQueue()
        self._book = RequestBook(member)  # ids, waiters, held requests: the I/O thread's only
        self._wake_pipe = WakePipe()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = JoinState(region, member, region_config.member_timeout_s, self.on_command, on_predecessor)
        self._redirect_to: str | None = None  # step 7: the leader a NOT_LEADER answer named (I/O thread)

    # ------------------------------------------------------------------ standing (any thread)
    @property
    def joined(self) -> threading.Event:
        """Set while the region counts this member in (``JoinState``)."""
        return self._state.joined

    @property
    def failure(self) -> BaseException | None:
        """Why the channel gave up (set once; None while it goes on)."""
        return self._state.failure

    # ------------------------------------------------------------------ API (any thread)
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"region-io-{self.member}", daemon=True)
        self._thread.start()

    def wait_joined(self, timeout: float) -> bool:
        """Wait until the region accepted this member (True), or it refused it for
        good (``failure`` set) or ``timeout`` passed (False)."""
        return self._state.wait_settled(timeout)

    def leave(self, timeout: float = LEAVE_TIMEOUT_S) -> RegionLeaveReply | None:
        """Leave the region gracefully; returns the controller's answer, or None
        when none came within ``timeout``."""
        if not self.joined.is_set() or self._thread is None or not self._thread.is_alive():
            return None
        self._state.begin_leave()  # the I/O thread must not join again
        self._send(RegionLeave(self.region, self.member, self.incarnation))
        if not self._state.wait_left(timeout):
            log.warning("%s: no answer to region_leave within %.1fs", self.member, timeout)
            return None
        return self._state.leave_reply

    def stop(self, leave: bool = False) -> None:
        if leave:
            self.leave()
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)
            if self._thread.is_alive():
                log.error("%s: control I/O thread did not stop within %.1fs", self.member, STOP_JOIN_S)
        self._wake_pipe.close()

    def region_phase(self) -> RegionPhase | None:
        """The region's phase as the last answer said (None while not joined)."""
        return self._state.region_phase()

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The endpoints the channel may talk to: those given, then those redirects added (step 7)."""
        return self._ring.endpoints

    @property
    def highest_epoch(self) -> int:
        """The highest leader epoch the channel has seen (step 8)."""
        return self._ring.fence.highest

    @property
    def dropped_frames(self) -> int:
        """Frames dropped for an epoch lower than one seen before (step 8)."""
        return self._ring.fence.dropped

    def _send(self, message: MemberRequest, waiter: Waiter | None = None) -> None:
        """Queue a request (ack, reset request, trigger, leave) for the I/O thread."""
        self._outbox.put((message, waiter))
        self._wake()

    def ack(
        self,
        command: CommandKind,
        *,
        seq: int | None = None,
        attempt: int | None = None,
        ok: bool = True,
        error: str | None = None,
        offsets: list[fields.OffsetClaim] | None = None,
        rebalance: bool = False,
        transactions: Transactions | None = None,
    ) -> None:
        """Answer a drain, checkpoint or reset (``command``) of checkpoint ``seq`` or
        reset round ``attempt``; ``offsets``: a checkpoint's claims, ``transactions``: its
        Kafka transactions (``coordinator/protocol/region/transactions.py``, step 1)."""
        self._send(
            RegionAck(
                self.region,
                self.member,
                self.incarnation,
                command,
                seq,
                attempt,
                ok,
                error,
                offsets,
                rebalance,
                transactions,
            )
        )

    def request_reset(self, *, force: bool, reason: str) -> None:
        self._send(RegionResetRequest(self.region, self.member, self.incarnation, force, reason[: fields.MAX_TEXT_LEN]))

    def trigger_reply(self, timeout: float) -> RegionTriggerReply | ErrorReply | None:
        """Operator-driven mode: ask for a checkpoint and wait for the answer; None
        when not joined or no answer came within ``timeout``."""
        waiter = Waiter()
        self._send(RegionTrigger(self.region, self.member, self.incarnation), waiter)
        if not waiter.done.wait(timeout):
            log.info("%s: no answer to region_trigger within %.1fs", self.member, timeout)
            return None
        reply = waiter.reply
        return reply if isinstance(reply, RegionTriggerReply | ErrorReply) else None

    def trigger(self, timeout: float = TRIGGER_ANSWER_S) -> bool:
        """Operator-driven mode: ask for a checkpoint; True when a drain of this
        member follows (the controller's ``trigger`` answer), False when none does
        (not now: the region resets or waits, this member drained already, no
        answer, not joined): the caller then does not wait for a drain."""
        reply = self.trigger_reply(timeout)
        if not isinstance(reply, RegionTriggerReply):
            return False
        if reply.trigger is TriggerAnswer.NOT_NOW:
            log.info("%s: trigger not served now: %s", self.member, reply.reason)
            return False
        return True

    # ------------------------------------------------------------------ I/O thread
    def _wake(self) -> None:
        self._wake_pipe.wake()

    def _socket(self) -> zmq.Socket[bytes]:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTING_ID, f"{self.member}/{self.incarnation}".encode())
        # A constant, short reconnect interval (no exponential backoff): after a
        # coordinator restart the member is back within RECONNECT_IVL_MS of the bind.
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MS)
        if self._curve is not None:
            server_public, public, secret = self._curve
            sock.curve_serverkey = server_public
            sock.curve_publickey = public
            sock.curve_secretkey = secret
        self._connected_to = self._ring.current
        sock.connect(self._connected_to)
        return sock

    def _connect(self, poller: zmq.Poller) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        """A socket to the ring's endpoint and its monitor, both polled. Connection events: a
        reconnect (the coordinator restarted) sends a heartbeat at once, whose NOT_REGISTERED
        answer makes us join again, instead of waiting for the next heartbeat."""
        sock = self._socket()
        poller.register(sock, zmq.POLLIN)
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED)
        poller.register(monitor, zmq.POLLIN)
        return sock, monitor

    @staticmethod
    def _unserved(clock: _IoClock, now: float) -> bool:
        """Step 6: the endpoint is to be left."""
        return now - clock.last_heard > MOVE_ON_S or now - clock.last_served > LOST_AFTER_S

    def _move_on(
        self, poller: zmq.Poller, sock: zmq.Socket[bytes], monitor: zmq.Socket[bytes], clock: _IoClock, now: float
    ) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        """Step 6: leave the endpoint that has not served for the next one."""
        silent = self._connected_to
        self._ring.move_from(silent)
        log.warning(
            "%s: the coordinator at %s has not served for %.1fs; trying %s",
            self.member,
            silent,
            now - clock.last_served,
            self._ring.current,
        )
        return self._reconnect(poller, sock, monitor, clock, now)

    def _follow_redirect(
        self, poller: zmq.Poller, sock: zmq.Socket[bytes], monitor: zmq.Socket[bytes], clock: _IoClock
    ) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        """Step 7: move to the leader a NOT_LEADER answer named."""
        leader, self._redirect_to = self._redirect_to, None
        if leader is None or leader == self._connected_to:
            return sock, monitor
        log.warning(
            "%s: the coordinator at %s is a standby; moving to the leader %s", self.member, self._connected_to, leader
        )
        self._ring.redirect(leader)
        return self._reconnect(poller, sock, monitor, clock, time.monotonic())

    def _reconnect(
        self, poller: zmq.Poller, sock: zmq.Socket[bytes], monitor: zmq.Socket[bytes], clock: _IoClock, now: float
    ) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        """Steps 6-7: drop the socket, connect to the ring's endpoint, and join there."""
        for polled in (sock, monitor):
            poller.unregister(polled)
        sock.disable_monitor()
        monitor.close(linger=0)
        sock.close(linger=0)
        self._state.lost()
        clock.last_served = clock.last_heard = now
        clock.join_sent = clock.last_hb = 0.0
        clock.connects = 0
        return self._connect(poller)

    def _run(self) -> None:
        poller = zmq.Poller()
        wake_fd = self._wake_pipe.fileno
        poller.register(wake_fd, zmq.POLLIN)
        sock, monitor = self._connect(poller)
        started = time.monotonic()
        clock = _IoClock(last_heard=started, last_served=started)
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if self._ring.several and not self._state.leaving and self._unserved(clock, now):
                    sock, monitor = self._move_on(poller, sock, monitor, clock, now)
                self._keep_membership(sock, clock, now)
                self._send_outgoing(sock)
                events = dict(poller.poll(int(min(HEARTBEAT_S, JOIN_RETRY_S) * 1000 / 2)))
                if wake_fd in events:
                    self._wake_pipe.drain()
                if monitor in events:
                    self._on_connected(sock, monitor, clock)
                if sock in events:
                    self._receive(sock, clock)
                if self._redirect_to is not None and not self._state.leaving:
                    sock, monitor = self._follow_redirect(poller, sock, monitor, clock)
                if self.failure is not None:
                    return
            self._flush_leave(sock)
        except BaseException as exc:  # the member's control loop sees it and exits non-zero
            log.exception("%s: control I/O thread failed", self.member)
            self._state.failure = exc
        finally:
            self._book.abandon()
            sock.disable_monitor()
            monitor.close(linger=0)
            sock.close(linger=200)

    def _keep_membership(self, sock: zmq.Socket[bytes], clock: _IoClock, now: float) -> None:
        """Join (again) when not joined, or heartbeat and notice a silent coordinator."""
        state = self._state
        if state.leaving:
            return
        if not self.joined.is_set() and (now - clock.join_sent >= JOIN_RETRY_S or state.join_now):
            clock.join_sent = now
            self._request(
                sock,
                RegionJoin(
                    self.region,
                    self.member,
                    self.incarnation,
                    os.getpid(),
                    self.region_config.to_dict(),
                    socket.gethostname(),
                    state.join_replaces(),
                ),
            )
        elif self.joined.is_set():
            if now - clock.last_hb >= HEARTBEAT_S:
                clock.last_hb = now
                self._request(sock, self._heartbeat())
            if now - clock.last_heard > LOST_AFTER_S:
                log.warning(
                    "%s: no answer from the coordinator for %.1fs; joining again", self.member, now - clock.last_heard
                )
                state.lost()
                clock.last_heard = now

    def _send_outgoing(self, sock: zmq.Socket[bytes]) -> None:
        """Send what was held until the join, then what other threads queued (held while not joined)."""
        if self.joined.is_set():
            for message in self._book.take_held():
                self._request(sock, message)
        for message, waiter in self._queued():
            if self.joined.is_set() or isinstance(message, RegionLeave):
                rid = self._request(sock, message)
                if waiter is not None:
                    self._book.await_answer(rid, waiter)
            else:
                self._book.hold(message, waiter)

    def _on_connected(self, sock: zmq.Socket[bytes], monitor: zmq.Socket[bytes], clock: _IoClock) -> None:
        """Count the connections; after a reconnect, heartbeat at once."""
        while True:
            try:
                monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            clock.connects += 1
            if clock.connects > 1 and self.joined.is_set() and not self._state.leaving:
                log.info("%s: reconnected to the coordinator; heartbeat at once", self.member)
                clock.last_hb = time.monotonic()
                self._request(sock, self._heartbeat())

    def _receive(self, sock: zmq.Socket[bytes], clock: _IoClock) -> None:
        while True:
            try:
                raw = sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            clock.last_heard = time.monotonic()
            if self._on_frame(raw):
                clock.last_served = clock.last_heard

    def _flush_leave(self, sock: zmq.Socket[bytes]) -> None:
        """Flush a final leave; nobody waits for other answers any more."""
        for message, waiter in self._queued():
            if waiter is not None:
                waiter.answer(None)
            if isinstance(message, RegionLeave):
                self._request(sock, message)

    def _heartbeat(self) -> RegionHeartbeat:
        report = None
        if self._report is not None:
            try:
                report = self._report()
            except Exception:  # the report only paces checkpoints; the heartbeat must go out
                log.warning("%s: Kafka group report failed; heartbeat without it", self.member, exc_info=True)
        dead_letters = self._dead_letters() if self._dead_letters is not None else None
        return RegionHeartbeat(self.region, self.member, self.incarnation, report, dead_letters=dead_letters)

    def _queued(self) -> Iterator[tuple[MemberRequest, Waiter | None]]:
        """What other threads queued (``_send``), oldest first, without waiting."""
        while True:
            try:
                yield self._outbox.get_nowait()
            except queue.Empty:
                return

    def _on_push(self, body: Mapping[str, Any]) -> None:
        """A pushed command (step 4): validated here, before anything acts on it; an
        invalid one is logged and dropped (the controller's phase timeout covers it,
        as for a push lost on the way)."""
        try:
            addressed = decode_command(body)
        except Invalid as exc:
            log.error("%s: invalid region_command dropped: %s", self.member, exc)
            return
        if addressed.region != self.region:
            log.error(
                "%s: region_command for region %r dropped (this member is in %r)",
                self.member,
                addressed.region,
                self.region,
            )
            return
        command = addressed.command
        match command:
            case Reset(rejoin=True) | ResetToInitial(rejoin=True) if self._on_rejoin_hint is not None:
                try:  # at once, on this thread: the command itself may wait behind others
                    self._on_rejoin_hint()
                except Exception:  # a hint only; the next Kafka heartbeat does the same
                    log.warning("%s: acting on the rejoin hint failed", self.member, exc_info=True)
        self.on_command(command)

    def _request(self, sock: zmq.Socket[bytes], message: MemberRequest) -> str:
        rid = self._book.new_id(message.TYPE)
        try:
            sock.send(envelope.encode(message.TYPE, message.to_body(), rid), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("%s: %s not sent: the coordinator connection is congested", self.member, message.TYPE)
        return rid

    def _on_frame(self, raw: bytes) -> bool:
        """One frame from the coordinator; False when it did not serve (step 6): undecodable, or
        ``LOAD_IN_PROGRESS``."""
        try:
            env = envelope.decode(raw, from_server=True)
        except envelope.BadEnvelope as bad:
            log.warning("%s: undecodable frame from the coordinator: %s", self.member, bad)
            return False
        if not self._ring.fence.admit(env.epoch or 0, f"{self.member}: a {env.type!r} from {self._connected_to}"):
            return False  # step 8
        if env.id is None and env.type == COMMAND_TYPE:
            self._on_push(env.body)
            return True
        msg_type, waiter = self._book.answered(env.id)
        try:
            reply = decode_reply(env.type, env.body)
        except Invalid as exc:
            log.warning("%s: invalid %s from the coordinator dropped: %s", self.member, env.type[:80], exc)
            reply = None
        if waiter is not None:
            waiter.answer(reply)
        match reply:
            case ErrorReply(code=ErrorCode.NOT_LEADER):
                self._redirect_to = leader_of(env.body)  # step 7 (None: as LOAD_IN_PROGRESS)
                self._state.on_error(msg_type, reply)
                return False
            case ErrorReply():
                self._state.on_error(msg_type, reply)
                return reply.code not in (ErrorCode.LOAD_IN_PROGRESS, ErrorCode.UNAVAILABLE)
            case RegionJoinReply():
                self._state.on_join_reply(reply)
            case RegionLeaveReply():
                self._state.on_leave_reply(reply)
            case RegionPhaseReply() | RegionTriggerReply():
                self._state.on_reply(reply)
        return True
