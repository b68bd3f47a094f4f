"""The region's consistent checkpoints: the last one, and each member's own.

No I/O, the coordinator's loop thread only. :class:`ConsistentCheckpoints` is
owned by :class:`~coordinator.region.machine.RegionCore`; every field is in the
region's durable document (``coordinator/region/document.py``):

1. ``last_consistent``: the last checkpoint every member answered and the
   continuity fence accepted (None: none yet); ``members`` answered it;
   ``offsets`` are its source offsets per partition (the resets' and later
   assignments' start).
2. When a checkpoint completes (:meth:`ConsistentCheckpoints.completed`), the
   members of the previous one that did not answer this one keep the previous
   one as their own (``AbsentCheckpoints``, bounded: the oldest are forgotten,
   returned to the caller, which logs them).
3. Every reset names each member's own checkpoint (:meth:`ConsistentCheckpoints.own`),
   the invariant it serves is stated there.
4. ``transactions``: each member's Kafka transactions of its last completed
   checkpoint, recorded when a checkpoint completes and resolved by resets
   (``coordinator/region/resolve.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.protocol.region.transactions import Transactions
from coordinator.region.document import RegionDocument
from coordinator.region.model import AbsentCheckpoints
from coordinator.region.resolve import ResolveEntries


class ConsistentCheckpoints:
    """See the module docstring. Not thread-safe."""

    def __init__(self) -> None:
        self.last_consistent: int | None = None
        self.members: list[str] = []  # the members of the last consistent checkpoint
        self.offsets: list[list[Any]] = []  # its source offsets
        # members absent from the last consistent checkpoint: their own one (own)
        self.absent = AbsentCheckpoints()
        # each member's Kafka transactions to resolve (step 4)
        self.transactions = ResolveEntries()

    def restore(self, stored: RegionDocument) -> None:
        """From the durable document, once, before anything else."""
        self.last_consistent = stored.last_consistent
        self.members = stored.checkpoint_members
        self.offsets = stored.checkpoint_offsets
        self.absent = AbsentCheckpoints(stored.absent_checkpoints)
        self.transactions = ResolveEntries(stored.transactions)

    def completed(
        self,
        seq: int,
        members: list[str],
        offsets: list[list[Any]],
        transactions: Mapping[str, Transactions | None],
    ) -> list[tuple[str, int]]:
        """Steps 2 and 4: checkpoint ``seq`` is consistent, answered by ``members``
        (sorted), with ``offsets``; ``transactions``: the answers' (None, or a member
        not named: it runs no transactional sink). Returns the absent (member, own
        checkpoint) pairs forgotten past the bound, oldest first."""
        self.transactions.checkpoint_completed(seq, {name: transactions.get(name) for name in members})
        forgotten = self.absent.checkpoint_completed(self.last_consistent, self.members, members)
        self.last_consistent = seq
        self.members = members
        self.offsets = offsets
        return forgotten

    def own(self, name: str) -> int | None:
        """The last completed checkpoint member ``name`` took part in (None: none).

        Invariant (nothing checkpointed is ever deleted unpublished): a member
        that acknowledged checkpoint N, which then completed, may die before the
        RESUME that publishes its interval N, and stay away past
        ``member_timeout_s`` while later checkpoints complete without it. Its
        interval N lies below N's offsets, which the others continue from, so
        nobody replays it: it must be published, not deleted, when a process of
        that name returns. Every reset therefore tells each member its own
        checkpoint: its operators load their data of that checkpoint (the file
        sink publishes every interval sealed up to it and deletes only later
        pending files; a keyed aggregate keeps its partial table), while its
        source starts from the region's last consistent offsets."""
        if self.last_consistent is not None and name in self.members:
            return self.last_consistent
        return self.absent.get(name)


__all__ = ["ConsistentCheckpoints"]
