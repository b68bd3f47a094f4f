"""What fails a query's planning: the one error the planner and its steps raise.

A :class:`PlanningFailed` propagates out of ``latestOffset``, ``partitions``
or ``commit`` and fails the query; the planner's steps that decide such a
failure (the group join, the data-loss check) raise it or a subclass, so a
caller catches one type.
"""

from __future__ import annotations


class PlanningFailed(RuntimeError):
    """A member failed or the planner could not complete a step; the query must fail."""


__all__ = ["PlanningFailed"]
