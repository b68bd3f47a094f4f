"""The members' Kafka transactions to resolve: the controller's side of
``coordinator/protocol/region/transactions.py`` (its steps 2 to 4; no I/O, the
loop thread only).

:class:`ResolveEntries` holds at most one :class:`Resolve` entry per member
name: the transactions of the last completed checkpoint that member answered
with transactions. It is owned by
:class:`~coordinator.region.checkpoints.ConsistentCheckpoints` and durable in
the region's document (``transactions``, ``coordinator/region/document.py``):

1. A checkpoint completes (:meth:`ResolveEntries.checkpoint_completed`): each
   answering member that sent ``transactions`` gets the entry
   ``Resolve(member, seq, transactions)``, replacing its previous one. One that
   answered null (no transactional sink now) loses its entry only when the
   entry lists no prepared transaction: a prepared transaction of a completed
   checkpoint must be committed by someone, whatever the member runs now. An
   entry of fence ids only may go: a process runs without the sink only after
   a restart, and the reset that brought it in fenced them. Members absent
   from the checkpoint keep their entries.
2. A reset round starts (:meth:`ResolveEntries.hand_out`, called by
   ``ResetDrive.start``): each member of the round is handed its own entry,
   and the first member in sorted order also the entries of every member not
   in the round (oldest checkpoint first, at most ``MAX_RESOLVE`` in all: the
   command's bound; the rest waits for the next round). Nobody else gets them.
   What was handed to whom is kept for step 3 (not durable: a restarted
   coordinator starts a new round, which hands them out again).
3. The round completes (:meth:`ResolveEntries.round_completed`, every member
   answered OK or left): for each member of the round still present (it
   answered, so it resolved what it was handed), an absent member's entry it
   resolved is dropped, and its own entry keeps only ``fence`` (``prepared``
   is empty: committed). An entry replaced since it was handed out is left
   alone. A member that left during the round resolved nothing: what it was
   handed stays for the next round. A round that fails or is restarted
   changes nothing (its successor hands the entries out again). The core
   persists the change before the RESUME.
4. No member is live: the coordinator resolves the entries itself
   (``coordinator/region/abandoned.py``) and reports what it resolved
   (:meth:`ResolveEntries.resolved_elsewhere`): an entry still recorded as it
   was handed to the coordinator is dropped (the core persists it); one
   replaced or dropped since is left alone. A failure is kept with the entry
   for the status until the entry changes.

Never forgotten by a count (unlike ``AbsentCheckpoints``): a forgotten entry
would leave its prepared transactions open for ever (the broker never times
out an abandoned transaction, and every ``read_committed`` reader of its
partitions stops below it) or leave a dead member's open interval unfenced.
What bounds them: one entry per name; a live member's is replaced at each of
its checkpoints; an absent member's lives until a completed round whose first
member answered, and every join starts a round that completes before any
further checkpoint does, so the absent entries are those of members that left
since the last such round. The stored document refuses more than
``MAX_RESOLVE`` entries (the bound of a reset's ``resolve``, whose decoder
reads them): reaching it takes more than 10,000 member names with
transactions between two such rounds, ten times the default member limit of a
region (``limits.max_members_per_group``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs

from coordinator.protocol.region.status import ResolveStatus
from coordinator.protocol.region.transactions import MAX_RESOLVE, Resolve, Transactions, decode_resolve
from coordinator.protocol.wire.errors import Invalid

log = logging.getLogger(__name__)


@attrs.frozen
class Resolved:
    """Step 3's outcome: whose entries a completed round resolved."""

    #: Absent members whose entries were dropped.
    dropped: tuple[str, ...] = ()
    #: Members of the round whose own prepared transactions were cleared (fence ids kept).
    cleared: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.dropped or self.cleared)


class ResolveEntries:
    """See the module docstring. Not thread-safe."""

    def __init__(self, entries: Sequence[Resolve] = ()) -> None:
        self._entries: dict[str, Resolve] = {e.member: e for e in entries}
        # step 2: member of the running round -> the entries handed to it
        self._handed: dict[str, tuple[Resolve, ...]] = {}
        # step 4: member -> (its entry, why the coordinator failed to resolve it); not durable
        self._errors: dict[str, tuple[Resolve, str]] = {}

    @classmethod
    def from_doc(cls, value: Any) -> ResolveEntries:
        """The stored ``transactions``, decoded with the protocol's decoder (at most
        ``MAX_RESOLVE`` entries, each fully checked) and one entry per member;
        raises ValueError naming what is wrong."""
        if not isinstance(value, list):
            raise ValueError(f"stored transactions {value!r:.40} is not a list")
        try:
            entries = decode_resolve(value, "transactions")
        except Invalid as exc:
            raise ValueError(f"stored {exc.message}") from exc
        names = [e.member for e in entries]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"stored transactions name the members {twice[:5]} more than once")
        return cls(entries)

    def to_doc(self) -> list[dict[str, Any]]:
        return [self._entries[name].to_wire() for name in sorted(self._entries)]

    def get(self, name: str) -> Resolve | None:
        return self._entries.get(name)

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> tuple[Resolve, ...]:
        """Every entry, by member name."""
        return tuple(self._entries[name] for name in sorted(self._entries))

    # ------------------------------------------------------------------ steps
    def checkpoint_completed(self, seq: int, answers: Mapping[str, Transactions | None]) -> None:
        """Step 1: checkpoint ``seq`` completed; ``answers``: each answering member's
        transactions (None: it runs no transactional sink)."""
        for name, transactions in answers.items():
            if transactions is not None:
                self._entries[name] = Resolve(name, seq, transactions)
                continue
            entry = self._entries.get(name)
            if entry is not None and not entry.transactions.prepared:
                del self._entries[name]

    def hand_out(self, members: Collection[str]) -> dict[str, tuple[Resolve, ...]]:
        """Step 2: the entries each member of a new round resolves (a member with none
        is not named)."""
        names = sorted(members)
        handed: dict[str, tuple[Resolve, ...]] = {}
        for name in names:
            own = self._entries.get(name)
            if own is not None:
                handed[name] = (own,)
        if names:
            absent = sorted((e for n, e in self._entries.items() if n not in members), key=lambda e: (e.seq, e.member))
            room = MAX_RESOLVE - len(handed.get(names[0], ()))
            if len(absent) > room:
                log.warning(
                    "%d absent members' transactions to resolve, at most %d in one reset: the %d newest "
                    "wait for the next reset round",
                    len(absent),
                    room,
                    len(absent) - room,
                )
            if absent:
                handed[names[0]] = handed.get(names[0], ()) + tuple(absent[:room])
        self._handed = handed
        return handed

    def round_completed(self, present: Collection[str]) -> Resolved:
        """Step 3: the round completed; ``present``: its members still in the region
        (each answered it). Returns whose entries changed (the core persists them)."""
        dropped: list[str] = []
        cleared: list[str] = []
        for receiver, entries in self._handed.items():
            if receiver not in present:
                continue
            for entry in entries:
                if self._entries.get(entry.member) != entry:
                    continue  # replaced since it was handed out
                if entry.member != receiver:
                    del self._entries[entry.member]
                    dropped.append(entry.member)
                elif entry.transactions.prepared:
                    fence_only = Transactions((), entry.transactions.fence)
                    self._entries[receiver] = Resolve(receiver, entry.seq, fence_only)
                    cleared.append(receiver)
        self._handed = {}
        return Resolved(tuple(sorted(dropped)), tuple(sorted(cleared)))

    def resolved_elsewhere(self, resolved: Sequence[Resolve], failed: Mapping[str, tuple[Resolve, str]]) -> list[str]:
        """Step 4: the coordinator resolved the entries ``resolved`` itself (each committed and
        fenced whole); ``failed``: member -> (its entry, why) for those it could not. An entry
        still recorded as it was handed out is dropped, once; one replaced or dropped since is
        left alone. Returns the members whose entries were dropped (the core persists them)."""
        dropped: list[str] = []
        for entry in resolved:
            if self._entries.get(entry.member) == entry:
                del self._entries[entry.member]
                self._errors.pop(entry.member, None)
                dropped.append(entry.member)
        for name, (entry, why) in failed.items():
            if self._entries.get(name) == entry:
                self._errors[name] = (entry, why)
        # failures of entries dropped or replaced since: at most one kept per entry
        self._errors = {n: f for n, f in self._errors.items() if self._entries.get(n) == f[0]}
        return sorted(dropped)

    def status(self) -> dict[str, ResolveStatus]:
        """Member name -> its entry as the region's status shows it."""
        out: dict[str, ResolveStatus] = {}
        for name, e in sorted(self._entries.items()):
            failed = self._errors.get(name)
            error = failed[1] if failed is not None and failed[0] == e else None
            t = e.transactions
            out[name] = ResolveStatus(e.seq, len(t.prepared), len(t.fence), t.bootstrap, error)
        return out


__all__ = ["ResolveEntries", "Resolved"]
