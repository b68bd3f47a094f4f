"""Why a region handler of the consumer operator could not do its job.

Raised by ``cr_consumer/operator/handlers.py`` (and the drain's Kafka commit,
``drain_commit.py``) to the region runtime, which then resets the region (a
failed drain or checkpoint) or retries the reset (``operator/region.py``'s
``StateHandler`` contract).
"""

from __future__ import annotations


class DrainError(RuntimeError):
    """The drain could not complete; the region must reset."""


class ResetError(RuntimeError):
    """The reset could not complete; the region retries it."""


class ContinuityError(RuntimeError):
    """The checkpoint cannot say where a partition's interval began (records
    submitted from a position no seek set); the region must reset (its seeks
    start every interval again)."""


__all__ = ["ContinuityError", "DrainError", "ResetError"]
