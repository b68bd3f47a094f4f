"""Completed drains, counted, so that a thread that asked for a drain can wait for it.

Used in operator-driven mode: the process thread asks the region for a drain
(its trigger) and waits for it; the operator's region handlers count each
drain that completed (``cr_consumer/operator/handlers.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class DrainSignal:
    """Completed drains, counted, so a thread that asked for a drain can wait for it.

    The process thread (operator-driven mode) reads :meth:`count`, asks the
    region for a drain, then :meth:`wait_after` that count; the handler caller
    calls :meth:`done` after each drain; a failure :meth:`wake` s the waiter.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0  # guarded by _cond

    def count(self) -> int:
        with self._cond:
            return self._count

    def done(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_after(self, before: int, timeout: float, give_up: Callable[[], bool]) -> bool:
        """Wait until a drain completed after ``before`` was read or ``give_up()``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count > before or give_up(), timeout)


__all__ = ["DrainSignal"]
