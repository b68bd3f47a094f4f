"""A member's standing in its region, as the region controller's answers tell it.

No I/O: the control channel's I/O thread (``control.py``) sends the requests
and feeds every answer here; any thread reads the outcome (``joined``,
``failure``, ``region_phase()``) or waits for it (``wait_settled``,
``wait_left``). The answers and what they do:

1. A ``region_join`` reply: joined (``joins`` counts them; ``last_reply``
   holds it). When it names a ``predecessor`` (this is a restarted process)
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
   the channel's retry; ``INVALID`` or ``CR_INDEX_MISMATCH`` to a join: fatal
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
from typing import Any

from coordinator.protocol.region.commands import Failed
from cr_consumer.runtime.member.name_claim import NameClaim

log = logging.getLogger(__name__)


class RegionFatal(RuntimeError):
    """The controller refused this member for good: bad or differing settings, or
    its name held by another live process (the member exits with ExitCode.CONFIG)."""


class JoinState:
    """The standing of one member process (see the module docstring).

    Shared thread state, written by the channel's I/O thread (the ``on_*``
    methods, ``lost``, ``join_request``, ``failure``) and read by any thread:
    ``joined`` (also cleared by the answer to a leave), ``failure`` (set once:
    the channel gave up), ``last_reply`` (replaced whole, never mutated),
    ``leave_reply`` (before ``_left`` is set), ``joins``. Written by the caller
    of ``begin_leave`` and read by the I/O thread: ``leaving``. The name claim,
    ``join_now`` and the predecessor flag are the I/O thread's only.
    """

    joined: threading.Event
    failure: BaseException | None
    last_reply: dict[str, Any]
    leave_reply: dict[str, Any] | None
    joins: int
    leaving: bool

    def __init__(
        self,
        region: str,
        member: str,
        member_timeout_s: float,
        on_failed: Callable[[Failed], None],
        on_predecessor: Callable[[dict[str, Any]], None] | None = None,
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
        self.last_reply = {}
        self.leave_reply = None
        self.leaving = False

    # ------------------------------------------------------------------ any thread
    def wait_settled(self, timeout: float) -> bool:
        """Wait until the region accepted this member (True), or it refused it for
        good (``failure`` set) or ``timeout`` passed (False)."""
        self._settled.wait(timeout)
        return self.joined.is_set() and self.failure is None

    def region_phase(self) -> str | None:
        """The region's phase as the last answer said (None while not joined)."""
        if not self.joined.is_set():
            return None
        phase = self.last_reply.get("phase")
        return phase if isinstance(phase, str) else None

    def begin_leave(self) -> None:
        """Step 5: the caller sends ``region_leave`` next; no join is sent any more."""
        self._left.clear()
        self.leaving = True

    def wait_left(self, timeout: float) -> bool:
        """Whether the answer to the leave came within ``timeout``."""
        return self._left.wait(timeout)

    # ------------------------------------------------------------------ I/O thread
    def join_request(self) -> dict[str, Any]:
        """The standing's part of a ``region_join`` body (a join is being sent now)."""
        self.join_now = False
        return {"replace": self._claim.replace}

    def lost(self) -> None:
        """Step 4: no answer for too long."""
        self.joined.clear()

    def on_error(self, msg_type: str | None, code: Any, message: Any) -> None:
        """Step 3: an error answer to ``msg_type``."""
        if code == "NOT_REGISTERED":
            if self.joined.is_set():
                log.warning("%s: the coordinator does not know us (%s); joining again", self.member, message)
            self.joined.clear()
        elif code == "LOAD_IN_PROGRESS":
            pass  # the join is re-sent after the channel's JOIN_RETRY_S
        elif msg_type == "region_join" and code in ("INVALID", "CR_INDEX_MISMATCH"):
            self._fail(RegionFatal(f"region {self.region!r} refused member {self.member!r}: {code}: {message}"))
        else:
            log.warning("%s: %s answered %s: %s", self.member, msg_type, code, message)

    def on_join_reply(self, body: dict[str, Any]) -> None:
        """Steps 1 and 2: the answer to a join."""
        if body.get("refused"):
            self._on_refused(body)
            return
        self.joins += 1
        self.last_reply = body
        self._handle_predecessor(body)
        self.joined.set()
        self._settled.set()
        log.info("%s: joined region %s (phase %s, last consistent checkpoint %s)", self.member,
                 self.region, body.get("phase"), body.get("last_consistent"))
        if body.get("phase") == "FAILED":  # terminal: nobody will send us commands
            why = body.get("failed_reason") or "no reason given"
            self._on_failed(Failed(f"region {self.region!r} is FAILED ({why}); it failed before this member "
                                   f"joined: start it under another --group"))

    def on_leave_reply(self, body: dict[str, Any]) -> None:
        """Step 5: the answer to the leave ends the membership."""
        self.leave_reply = body
        self.joined.clear()
        self._left.set()

    def on_reply(self, body: dict[str, Any]) -> None:
        """Any other answer: the latest word on the region (its phase)."""
        self.last_reply = body

    def _fail(self, failure: RegionFatal) -> None:
        self.failure = failure
        log.error("%s", failure)
        self._settled.set()

    def _on_refused(self, reply: dict[str, Any]) -> None:
        """The member name is held by another live process (step 2, name_claim.py)."""
        holder = reply.get("holder") or {}
        what = self._claim.on_refused(reply, time.monotonic())
        if what == "replace":
            log.info("%s: the name's holder (pid %s on this host) is gone; joining as its replacement",
                     self.member, holder.get("pid"))
            self.join_now = True
        elif what == "retry":
            log.info("%s: member name held by pid %s on %s (heard %.1fs ago); retrying the join", self.member,
                     holder.get("pid"), holder.get("host"), holder.get("silent_s", 0.0))
        else:
            self._fail(RegionFatal(what))

    def _handle_predecessor(self, reply: dict[str, Any]) -> None:
        """Once per process: let the member remove its dead predecessor's Kafka consumer."""
        pred = reply.get("predecessor")
        if self._predecessor_done or not isinstance(pred, dict) or self._on_predecessor is None:
            return
        self._predecessor_done = True
        log.info("%s: replaces incarnation %s (pid %s, Kafka member %s)", self.member, pred.get("incarnation"),
                 pred.get("pid"), pred.get("kafka_member_id"))
        try:
            self._on_predecessor(pred)
        except Exception:  # an optimisation (the session timeout removes it); logged
            log.warning("%s: handling the predecessor %s failed", self.member, pred, exc_info=True)
