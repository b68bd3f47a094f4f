"""A member's standing in its region, as the region controller's answers tell it.

No I/O: the control channel's I/O thread (``control.py``) sends the requests
and feeds every answer here, decoded into the protocol's reply classes
(``coordinator/protocol/region/replies.py``); any thread reads the outcome
(``joined``, ``failure``, ``region_phase()``) or waits for it
(``wait_settled``, ``wait_left``). The answers and what they do:

1. A ``region_join`` reply: joined (``joins`` counts them; ``phase`` is the
   region's). When it names a ``predecessor`` (this is a restarted process)
   with a Kafka member id, ``on_predecessor`` runs first, once per process, so
   before the member starts its Kafka source (``group_state.evict_predecessor``).
   A region that is FAILED already is told to the member as a ``Failed``
   command (nobody will send it commands).
2. A ``refused`` join reply (another live process holds this member name;
   ``name_claim.py``): if the holder ran on this host and its pid is gone, join
   again at once with ``replace`` (``join_now``); else keep retrying; after
   ``member_timeout_s`` + ``DUPLICATE_GRACE_S`` of refusals fail for good
   (``failure``: a :class:`RegionFatal` naming the duplicate).
3. An error answer: ``NOT_REGISTERED`` (the coordinator restarted and forgot
   us): not joined, join again; ``LOAD_IN_PROGRESS``: the join is re-sent by
   the channel's retry; ``NOT_LEADER`` (a standby): not joined, the channel
   moves to the leader it names and joins there; ``INVALID`` or ``CR_INDEX_MISMATCH`` to a join: fatal
   (``failure``, the member exits with ExitCode.CONFIG); any other is logged.
4. No answer at all for the channel's ``LOST_AFTER_S`` (``lost()``): not
   joined, join again.
5. A graceful leave (``begin_leave``): no join is sent any more; the
   ``region_leave`` reply is kept as ``leave_reply`` and ends the membership.

``wait_settled`` returns once the member is joined or has failed for good.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from coordinator.protocol.region.commands import Failed
from coordinator.protocol.region.replies import (
    ErrorReply,
    NameHolder,
    Predecessor,
    RegionJoinReply,
    RegionLeaveReply,
    RegionPhase,
    RegionPhaseReply,
    RegionTriggerReply,
)
from coordinator.protocol.wire.errors import ErrorCode
from cr_consumer.runtime.member.name_claim import ClaimStep, NameClaim

log = logging.getLogger(__name__)


class RegionFatal(RuntimeError):
    """The controller refused this member for good: bad or differing settings, or
    its name held by another live process (the member exits with ExitCode.CONFIG)."""


class JoinState:
    """The standing of one member process (see the module docstring).

    Shared thread state, written by the channel's I/O thread (the ``on_*``
    methods, ``lost``, ``join_replaces``, ``failure``) and read by any thread:
    ``joined`` (also cleared by the answer to a leave), ``failure`` (set once:
    the channel gave up), ``phase`` (the region's, as the last answer said),
    ``leave_reply`` (before ``_left`` is set), ``joins``. Written by the caller
    of ``begin_leave`` and read by the I/O thread: ``leaving``. The name claim,
    ``join_now`` and the predecessor flag are the I/O thread's only.
    """

    joined: threading.Event
    failure: BaseException | None
    phase: RegionPhase | None
    leave_reply: RegionLeaveReply | None
    joins: int
    leaving: bool

    def __init__(
        self,
        region: str,
        member: str,
        member_timeout_s: float,
        on_failed: Callable[[Failed], None],
        on_predecessor: Callable[[Predecessor], None] | None = None,
    ) -> None:
        self.region = region
        self.member = member
        self._on_failed = on_failed
        self._on_predecessor = on_predecessor
        self._predecessor_done = False
        self._claim = NameClaim(region, member, member_timeout_s)
        self.joined = threading.Event()
        self._settled = threading.Event()  # joined, or failed for good
        self._left = threading.Event()
        self.join_now = False
        self.failure = None
        self.joins = 0
        self.phase = None
        self.leave_reply = None
        self.leaving = False

    # ------------------------------------------------------------------ any thread
    def wait_settled(self, timeout: float) -> bool:
        """Wait until the region accepted this member (True), or it refused it for
        good (``failure`` set) or ``timeout`` passed (False)."""
        self._settled.wait(timeout)
        return self.joined.is_set() and self.failure is None

    def region_phase(self) -> RegionPhase | None:
        """The region's phase as the last answer said (None while not joined)."""
        if not self.joined.is_set():
            return None
        return self.phase

    def begin_leave(self) -> None:
        """Step 5: the caller sends ``region_leave`` next; no join is sent any more."""
        self._left.clear()
        self.leaving = True

    def wait_left(self, timeout: float) -> bool:
        """Whether the answer to the leave came within ``timeout``."""
        return self._left.wait(timeout)

    # ------------------------------------------------------------------ I/O thread
    def join_replaces(self) -> bool:
        """A join is being sent now: whether it replaces the name's holder (its ``replace``)."""
        self.join_now = False
        return self._claim.replace

    def lost(self) -> None:
        """Step 4: no answer for too long."""
        self.joined.clear()

    def on_error(self, msg_type: str | None, error: ErrorReply) -> None:
        """Step 3: an error answer to ``msg_type`` (None: to a forgotten request)."""
        code, message = error.code, error.message
        if code is ErrorCode.NOT_REGISTERED:
            if self.joined.is_set():
                log.warning("%s: the coordinator does not know us (%s); joining again", self.member, message)
            self.joined.clear()
        elif code in (ErrorCode.LOAD_IN_PROGRESS, ErrorCode.UNAVAILABLE):
            pass  # the join is re-sent after the channel's JOIN_RETRY_S
        elif code is ErrorCode.NOT_LEADER:
            self.joined.clear()  # the channel moves to the leader and joins there
        elif msg_type == "region_join" and code in (ErrorCode.INVALID, ErrorCode.CR_INDEX_MISMATCH):
            self._fail(RegionFatal(f"region {self.region!r} refused member {self.member!r}: {code.value}: {message}"))
        else:
            log.warning("%s: %s answered %s: %s", self.member, msg_type, code.value, message)

    def on_join_reply(self, reply: RegionJoinReply) -> None:
        """Steps 1 and 2: the answer to a join."""
        if reply.refused is not None:
            self._on_refused(reply.refused.holder)
            return
        self.joins += 1
        self.phase = reply.phase
        self._handle_predecessor(reply.predecessor)
        self.joined.set()
        self._settled.set()
        log.info(
            "%s: joined region %s (phase %s, last consistent checkpoint %s)",
            self.member,
            self.region,
            reply.phase.value,
            reply.last_consistent,
        )
        if reply.phase is RegionPhase.FAILED:  # terminal: nobody will send us commands
            why = reply.failed_reason or "no reason given"
            self._on_failed(
                Failed(
                    f"region {self.region!r} is FAILED ({why}); it failed before this member "
                    f"joined: start it under another --group"
                )
            )

    def on_leave_reply(self, reply: RegionLeaveReply) -> None:
        """Step 5: the answer to the leave ends the membership."""
        self.leave_reply = reply
        self.joined.clear()
        self._left.set()

    def on_reply(self, reply: RegionPhaseReply | RegionTriggerReply) -> None:
        """Any other answer: the latest word on the region (its phase)."""
        self.phase = reply.phase

    def _fail(self, failure: RegionFatal) -> None:
        self.failure = failure
        log.error("%s", failure)
        self._settled.set()

    def _on_refused(self, holder: NameHolder) -> None:
        """The member name is held by another live process (step 2, name_claim.py)."""
        what = self._claim.on_refused(holder, time.monotonic())
        if what is ClaimStep.REPLACE:
            log.info(
                "%s: the name's holder (pid %s on this host) is gone; joining as its replacement",
                self.member,
                holder.pid,
            )
            self.join_now = True
        elif what is ClaimStep.RETRY:
            log.info(
                "%s: member name held by pid %s on %s (heard %.1fs ago); retrying the join",
                self.member,
                holder.pid,
                holder.host,
                holder.silent_s,
            )
        else:
            self._fail(RegionFatal(self._claim.duplicate(holder)))

    def _handle_predecessor(self, pred: Predecessor | None) -> None:
        """Once per process: let the member remove its dead predecessor's Kafka consumer."""
        if self._predecessor_done or pred is None or self._on_predecessor is None:
            return
        self._predecessor_done = True
        log.info(
            "%s: replaces incarnation %s (pid %s, Kafka member %s)",
            self.member,
            pred.incarnation,
            pred.pid,
            pred.kafka_member_id,
        )
        try:
            self._on_predecessor(pred)
        except Exception:  # an optimisation (the session timeout removes it); logged
            log.warning("%s: handling the predecessor %s failed", self.member, pred, exc_info=True)
