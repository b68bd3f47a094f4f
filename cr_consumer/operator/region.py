"""The contract between operators and the consistent-region runtime.

A consistent region makes a set of operators agree on checkpoints. The runtime
(``cr_consumer.runtime``, driven by the coordinator's region controller) calls
every operator's :class:`StateHandler` methods; a source operator additionally
takes a :class:`RegionPermit` around each batch of tuples it submits and asks
the runtime for a reset or a drain through :class:`RegionRequests`.

The cycle, as seen by one operator: ``drain()``, ``checkpoint(seq)``, and later
``retire_checkpoint(seq)``; or ``reset(seq, data, attempt)`` (or
``reset_to_initial_state(attempt)``) instead. :class:`StateHandler` gives each
method's contract. A method that cannot do its job raises (the consumer
operator: :class:`DrainError`, :class:`ResetError`, :class:`ContinuityError`).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from coordinator.protocol.region.transactions import Transactions

log = logging.getLogger(__name__)


@runtime_checkable
class TransactionalOperator(Protocol):
    """An operator that writes Kafka transactions the region resolves
    (``coordinator/protocol/region/transactions.py``): the member runtime adds its
    ``transactions()`` to the checkpoint ack."""

    def transactions(self) -> Transactions:
        """What the operator's last ``checkpoint`` prepared, and every transactional id it writes with."""


@runtime_checkable
class CompletionListener(Protocol):
    """An operator told when a checkpoint it took part in completed (the region's RESUME): the
    exactly-once sinks publish or commit there. Optional: other operators are not told."""

    def notify_checkpoint_complete(self, seq: int) -> None:
        """Checkpoint ``seq`` completed; the permit is released (the next interval may run)."""


@runtime_checkable
class StateHandler(Protocol):
    """What the region runtime calls on every operator of a region.

    Common to every method: the runtime calls them from its own threads (the
    member's control loop, a test, the standalone driver), never from the
    operator's own threads; an operator that can be called from two runtime
    threads at once serializes the calls itself. A method that cannot do its
    job raises, and the region resets (drain, checkpoint) or retries (reset).
    For a source, the runtime holds the region permit (``permit.block()``)
    from before ``drain`` until after ``checkpoint``, and around each reset;
    it unblocks the permit at RESUME.
    """

    def drain(self) -> None:
        """Finish in-flight work; afterwards the operator's durable output is
        exactly what it received before the call.

        Called first in every checkpoint cycle: a source stops fetching and
        commits what it has submitted. The caller guarantees that no new tuple
        arrives during the call (the permit is blocked). A failure raises; the
        runtime then resets the region instead of checkpointing.
        """

    def checkpoint(self, seq: int) -> bytes:
        """Return the state as of the last ``drain`` as versioned JSON bytes (a
        language-neutral encoding).

        Called right after a successful ``drain`` of the same cycle, with the
        permit still blocked; ``seq`` increases from cycle to cycle. The runtime
        stores the bytes and hands them back to ``reset(seq, ...)``.
        """

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        """Go back to the state of checkpoint ``seq``.

        ``data`` is what ``checkpoint(seq)`` returned in this operator, or a
        merge of every member's data made by the runtime; empty when this
        operator has nothing for ``seq``. ``attempt`` numbers the reset
        attempts for ``seq`` (from 0), so that cross-member merges never mix
        two attempts; the caller retries with a higher attempt after a failure. Called with the permit blocked, possibly
        before any ``drain`` (a restarted member).
        """

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        """Go back to the state before any tuple (no checkpoint completed yet).

        As ``reset``: permit blocked, ``attempt`` numbers the attempts.
        """

    def retire_checkpoint(self, seq: int) -> None:
        """Checkpoints with id <= ``seq`` will never be reset to: drop their state.

        Called after a later checkpoint completed; the permit may or may not
        be held.
        """


class RegionRequests(Protocol):
    """What a source operator asks of the region runtime it belongs to.

    Both are called from the operator's own threads (the event thread after a
    revocation, the process thread at the trigger count), never while the
    caller holds the permit; neither may block for long.
    """

    def request_reset(self, *, force: bool, reason: str) -> None:
        """Ask the region to reset. ``force`` resets the consecutive-attempt
        counter (used for rebalances, which are not failures)."""

    def request_drain(self, *, reason: str) -> bool | None:
        """Operator-driven regions: ask the region to drain and checkpoint now
        (a source calls it every trigger-count tuples, without holding the
        permit). Returns False when no drain of this source follows (the region
        is resetting or waiting, or it drained already in the running cycle):
        the source goes on at once. Otherwise (True, or None from a requester
        that cannot tell) the source waits for its own ``drain()`` call, at
        most the drain timeout."""


class RegionPermit:
    """The region permit: held by a source while it submits tuples, and by the
    runtime while it drains, checkpoints or resets.

    A plain lock would let the runtime starve behind a busy source; this one is
    fair to the runtime: once the runtime asks (``block()``), sources cannot
    re-acquire until it ``unblock()``s.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._holders = 0
        self._blocked = False

    def acquire(self, timeout: float) -> bool:
        """Acquire for tuple submission; False when blocked past ``timeout``."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._blocked, timeout):
                return False
            self._holders += 1
            return True

    def release(self) -> None:
        with self._cond:
            self._holders -= 1
            self._cond.notify_all()

    def block(self, timeout: float) -> bool:
        """Stop new acquisitions and wait until no source holds the permit."""
        with self._cond:
            self._blocked = True
            return self._cond.wait_for(lambda: self._holders == 0, timeout)

    def unblock(self) -> None:
        with self._cond:
            self._blocked = False
            self._cond.notify_all()

    @property
    def blocked(self) -> bool:
        return self._blocked


class NoRegion:
    """A source with no region runtime attached: requests are logged and dropped."""

    def request_reset(self, *, force: bool, reason: str) -> None:
        log.warning("region reset requested (force=%s) but no region runtime is attached: %s", force, reason)

    def request_drain(self, *, reason: str) -> bool | None:
        log.warning("region drain requested but no region runtime is attached: %s", reason)
        return None


class DrainError(RuntimeError):
    """The drain could not complete; the region must reset."""


class ResetError(RuntimeError):
    """The reset could not complete; the region retries it."""


class ContinuityError(RuntimeError):
    """The checkpoint cannot say where a partition's interval began (records
    submitted from a position no seek set); the region must reset (its seeks
    start every interval again)."""


__all__ = [
    "ContinuityError",
    "DrainError",
    "NoRegion",
    "RegionPermit",
    "RegionRequests",
    "ResetError",
    "StateHandler",
    "TransactionalOperator",
]
