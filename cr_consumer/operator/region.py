"""The contract between operators and the consistent-region runtime.

A consistent region makes a set of operators agree on checkpoints. The runtime
(``cr_consumer.runtime``, driven by the coordinator's region controller) calls
every operator's :class:`StateHandler` methods; a source operator additionally
takes a :class:`RegionPermit` around each batch of tuples it submits and may ask
the runtime for a reset through :class:`ResetRequester`.

The cycle, as seen by one operator:

1. ``drain()``: finish all in-flight work so that no tuple is half-processed;
   a source stops fetching and commits what it has submitted. While the runtime
   drains, it holds the permit, so no new tuple is submitted.
2. ``checkpoint(seq) -> bytes``: return the operator's state as of the drain,
   in a versioned, language-neutral encoding (JSON). The runtime stores it.
3. ``reset(seq, data, attempt)``: go back to the state of checkpoint ``seq``
   (``data`` is what ``checkpoint(seq)`` returned). ``attempt`` numbers the
   reset attempts of the region for that checkpoint, so that cross-member
   merges never mix two attempts.
4. ``reset_to_initial_state(attempt)``: go back to the state before any tuple.
5. ``retire_checkpoint(seq)``: checkpoints with id <= seq will never be reset
   to; drop what belongs to them.

A handler method that cannot do its job raises; the runtime then resets the
region (for a failed drain or checkpoint) or retries the reset.
"""

from __future__ import annotations

import threading
from typing import Protocol, runtime_checkable


@runtime_checkable
class StateHandler(Protocol):
    def drain(self) -> None: ...

    def checkpoint(self, seq: int) -> bytes: ...

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None: ...

    def reset_to_initial_state(self, attempt: int = 0) -> None: ...

    def retire_checkpoint(self, seq: int) -> None: ...


class ResetRequester(Protocol):
    def request_reset(self, *, force: bool, reason: str) -> None:
        """Ask the region to reset. ``force`` resets the consecutive-attempt
        counter (used for rebalances, which are not failures)."""


class DrainRequester(Protocol):
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
    """Standalone use: nobody to ask for a reset; requests are logged by the operator."""

    def request_reset(self, *, force: bool, reason: str) -> None:  # pragma: no cover - trivial
        pass
