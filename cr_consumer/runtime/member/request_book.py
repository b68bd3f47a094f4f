"""The control channel's requests, from the thread that makes one to its answer (``control.py``, step 3).

Other threads put their requests (acks, reset requests, triggers, the leave) in the
channel's :class:`Outbox`, which wakes the I/O thread. Every request the channel sends gets an id; the answers that come back are
matched to the request's type (for ``join_state.py``) and, for a request whose
answer another thread waits for (the trigger), to its :class:`Waiter`. While the
channel is not joined, :class:`RequestBook` holds what must not be lost (acks,
the reset request) and drops the rest. All bounded: a coordinator restart loses
answers, and their waiters and pending ids are forgotten oldest first.
"""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
from collections.abc import Iterator

from coordinator.protocol.common.osutil import WakePipe
from coordinator.protocol.region.messages import MemberRequest, RegionAck, RegionResetRequest
from coordinator.protocol.region.replies import ErrorReply, RegionReply

log = logging.getLogger(__name__)

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
       (``control.py``'s docstring, step 3: a reset request is held, one, a forced one
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


class Outbox:
    """The requests other threads queue for the I/O thread (any thread puts, the I/O thread
    takes), and the pipe that wakes the I/O thread's poll when one is put (``wake_pipe``)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[MemberRequest, Waiter | None]] = queue.SimpleQueue()
        self.wake_pipe = WakePipe()

    def put(self, message: MemberRequest, waiter: Waiter | None = None) -> None:
        """Queue a request (ack, reset request, trigger, leave) and wake the I/O thread."""
        self._queue.put((message, waiter))
        self.wake_pipe.wake()

    def taken(self) -> Iterator[tuple[MemberRequest, Waiter | None]]:
        """What other threads queued, oldest first, without waiting (the I/O thread's)."""
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return
