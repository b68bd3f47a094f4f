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
   the same way (bounded, oldest dropped; ``request_book.py``): a command can arrive
   just before the join reply that makes the channel count itself joined, and
   a dropped answer to it failed that phase only by its timeout; the
   controller ignores answers that are stale by then.
   ``trigger_reply`` waits for the answer, at most its timeout; not joined,
   it is answered None at once.
4. Pushed ``region_command`` messages are validated (an invalid one is logged and
   dropped) and go to ``on_command`` (the member's control thread queue) as typed
   commands, in arrival order; a reset with ``rejoin`` first calls
   ``on_rejoin_hint``: ``pushed_commands.py``.
5. A ``NOT_REGISTERED`` answer (the coordinator restarted and forgot us) or no
   answer to anything for ``LOST_AFTER_S``: back to step 1.
6.-8. Several endpoints (a coordinator on Kafka with standbys), moving on from a silent
   one, following a ``NOT_LEADER`` answer to the leader, and dropping the frames of a
   deposed leader's epoch: ``coordinator_link.py``, which owns the socket.
Other error answers are logged (an INVALID join is fatal: ``failure`` is set;
``join_state.py``, step 3).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import zmq

from coordinator.protocol.common.endpoints import EndpointRing, EpochFence
from coordinator.protocol.region.commands import COMMAND_TYPE, CommandKind, RegionCommand
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
    RegionTriggerReply,
    TriggerAnswer,
    decode_reply,
)
from coordinator.protocol.region.transactions import Transactions
from coordinator.protocol.wire import envelope, fields
from coordinator.protocol.wire.errors import ErrorCode, Invalid, leader_of
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.member.coordinator_link import LOST_AFTER_S, CoordinatorLink
from cr_consumer.runtime.member.join_state import JoinState
from cr_consumer.runtime.member.pushed_commands import PushedCommands
from cr_consumer.runtime.member.request_book import Outbox, RequestBook, Waiter

log = logging.getLogger(__name__)

#: Heartbeat interval: how the controller tells a silent (killed, partitioned)
#: member from a live one; its member_timeout_s must be several of these.
HEARTBEAT_S = 0.5
#: Re-send a join that got no answer (coordinator down or restarting).
JOIN_RETRY_S = 0.5
#: Bound on the I/O thread's exit at stop(), so a wedged socket cannot hang the
#: member's shutdown.
STOP_JOIN_S = 5.0
#: Bound on waiting for the answer to a graceful leave (the coordinator may be down).
LEAVE_TIMEOUT_S = 3.0
#: Bound on the process thread's wait for the answer to a trigger: a coordinator
#: that does not answer must not stall the records' flow (the source then goes
#: on without waiting for a drain).
TRIGGER_ANSWER_S = 2.0


class ControlChannel:
    """The member's end of the control channel (see the module docstring).

    The member's standing (``joined``, ``failure``, ``region_phase()``, the
    answer to a leave: read by any thread) is its ``JoinState``, written by the
    I/O thread as the answers arrive (``join_state.py`` says which thread
    writes what). The outbox (and its wake-up pipe) is any thread's; everything
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
        self.region = region
        self.member = member
        self.incarnation = incarnation
        self.region_config = region_config
        self.on_command = fault_points.lossy(on_command, member)  # itself unless a drill arms receive-* points
        self._ctx = context or zmq.Context.instance()
        self._curve = curve  # (server public, client public, client secret)
        self._report = report
        self._dead_letters = dead_letters
        self._outbox = Outbox()  # requests of other threads for the I/O thread, and its wake-up pipe
        self._book = RequestBook(member)  # ids, waiters, held requests: the I/O thread's only
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state = JoinState(region, member, region_config.member_timeout_s, self.on_command, on_predecessor)
        self._pushes = PushedCommands(region, member, self.on_command, on_rejoin_hint)  # the I/O thread's

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
        self._outbox.put(RegionLeave(self.region, self.member, self.incarnation))
        if not self._state.wait_left(timeout):
            log.warning("%s: no answer to region_leave within %.1fs", self.member, timeout)
            return None
        return self._state.leave_reply

    def stop(self, leave: bool = False) -> None:
        if leave:
            self.leave()
        self._stop.set()
        self._outbox.wake_pipe.wake()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)
            if self._thread.is_alive():
                log.error("%s: control I/O thread did not stop within %.1fs", self.member, STOP_JOIN_S)
        self._outbox.wake_pipe.close()

    def region_phase(self) -> RegionPhase | None:
        """The region's phase as the last answer said (None while not joined)."""
        return self._state.region_phase()

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The endpoints the channel may talk to: those given, then those redirects added (step 7)."""
        return self._ring.endpoints

    @property
    def fence(self) -> EpochFence:
        """The leader epochs the channel has seen: ``highest``, and ``dropped``, the frames it
        dropped for an epoch lower than one seen before (``coordinator_link.py``)."""
        return self._ring.fence

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
        self._outbox.put(
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
        self._outbox.put(
            RegionResetRequest(self.region, self.member, self.incarnation, force, reason[: fields.MAX_TEXT_LEN])
        )

    def trigger_reply(self, timeout: float) -> RegionTriggerReply | ErrorReply | None:
        """Operator-driven mode: ask for a checkpoint and wait for the answer; None
        when not joined or no answer came within ``timeout``."""
        waiter = Waiter()
        self._outbox.put(RegionTrigger(self.region, self.member, self.incarnation), waiter)
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
    def _run(self) -> None:
        poller = zmq.Poller()
        wake_fd = self._outbox.wake_pipe.fileno
        poller.register(wake_fd, zmq.POLLIN)
        routing_id = f"{self.member}/{self.incarnation}".encode()
        link = CoordinatorLink(self._ring, self.member, routing_id, self._ctx, self._curve, poller, self._state.lost)
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if self._ring.several and not self._state.leaving and link.unserved(now):
                    link.move_on(now)
                self._keep_membership(link, now)
                self._send_outgoing(link.sock)
                events = dict(poller.poll(int(min(HEARTBEAT_S, JOIN_RETRY_S) * 1000 / 2)))
                if wake_fd in events:
                    self._outbox.wake_pipe.drain()
                if link.monitor in events:
                    self._on_connected(link)
                if link.sock in events:
                    self._receive(link)
                if link.redirect_to is not None and not self._state.leaving:
                    link.follow_redirect()
                if self.failure is not None:
                    return
            self._flush_leave(link.sock)
        except BaseException as exc:  # the member's control loop sees it and exits non-zero
            log.exception("%s: control I/O thread failed", self.member)
            self._state.failure = exc
        finally:
            self._book.abandon()
            link.close()

    def _keep_membership(self, link: CoordinatorLink, now: float) -> None:
        """Join (again) when not joined, or heartbeat and notice a silent coordinator."""
        state, sock, clock = self._state, link.sock, link.clock
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
        for message, waiter in self._outbox.taken():
            if self.joined.is_set() or isinstance(message, RegionLeave):
                rid = self._request(sock, message)
                if waiter is not None:
                    self._book.await_answer(rid, waiter)
            else:
                self._book.hold(message, waiter)

    def _on_connected(self, link: CoordinatorLink) -> None:
        """Count the connections; after a reconnect, heartbeat at once."""
        for _ in range(link.reconnections()):
            if self.joined.is_set() and not self._state.leaving:
                log.info("%s: reconnected to the coordinator; heartbeat at once", self.member)
                link.clock.last_hb = time.monotonic()
                self._request(link.sock, self._heartbeat())

    def _receive(self, link: CoordinatorLink) -> None:
        clock = link.clock
        while True:
            try:
                raw = link.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            clock.last_heard = time.monotonic()
            if self._on_frame(link, raw):
                clock.last_served = clock.last_heard

    def _flush_leave(self, sock: zmq.Socket[bytes]) -> None:
        """Flush a final leave; nobody waits for other answers any more."""
        for message, waiter in self._outbox.taken():
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

    def _request(self, sock: zmq.Socket[bytes], message: MemberRequest) -> str:
        rid = self._book.new_id(message.TYPE)
        try:
            sock.send(envelope.encode(message.TYPE, message.to_body(), rid), zmq.NOBLOCK)
        except zmq.Again:
            log.warning("%s: %s not sent: the coordinator connection is congested", self.member, message.TYPE)
        return rid

    def _on_frame(self, link: CoordinatorLink, raw: bytes) -> bool:
        """One frame from the coordinator; False when it did not serve (step 6): undecodable, or
        ``LOAD_IN_PROGRESS``."""
        try:
            env = envelope.decode(raw, from_server=True)
        except envelope.BadEnvelope as bad:
            log.warning("%s: undecodable frame from the coordinator: %s", self.member, bad)
            return False
        if not link.admit(env.epoch, env.type):
            return False  # step 8
        if env.id is None and env.type == COMMAND_TYPE:
            self._pushes.receive(env.body)
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
                link.redirect_to = leader_of(env.body)  # step 7 (None: as LOAD_IN_PROGRESS)
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
