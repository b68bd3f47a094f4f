"""The member's side of the region protocol: the controller's commands executed
on the member's operators and its checkpoint store, each answered with a
``region_ack`` (``process.py`` runs them on its control thread, in order).

The operators are the Kafka source first, then the pipeline's operators in
pipeline order (each under its operator id, the key of its data in the
checkpoint store):

* ``drain {seq}``: block the permit (drain timeout), then ``drain()`` every
  operator in order, the source first. A pipeline error since the last reset
  (``broken``) fails the drain: its records were lost, so this interval must
  not become a checkpoint.
* ``checkpoint {seq}``: ``checkpoint(seq)`` every operator, save each in the
  checkpoint store, seal ``seq``; the ack carries the source's offsets, each
  as ``[topic, partition, from, to]`` (the interval the source processed), and
  the sum of the ``transactions()`` of every operator that writes Kafka
  transactions (a ``TransactionalOperator``: the Kafka sink), None when none does.
* ``resume {complete, offsets}``: when a checkpoint completed, the source keeps
  ``offsets`` (the checkpoint's union) for partitions assigned to it later; the
  permit is unblocked; then ``notify_checkpoint_complete(complete)`` on every
  pipeline operator (the file sink publishes).
* ``retire {seq}``: ``retire_checkpoint(seq)`` on every operator, delete
  checkpoints <= seq from the store.
* ``reset {seq, attempt, members, offsets, own, resolve}``: block the permit;
  resolve the Kafka transactions of ``resolve`` (``resolver``: commit what each
  entry prepared, fence its ids; ``coordinator/protocol/region/transactions.py``,
  step 3), a failure failing the reset with its text; then in reverse
  order ``reset(own, data)`` each pipeline operator with its stored data of
  ``own``, this member's own last completed checkpoint (``seq``, or an earlier
  one when it was away while ``seq`` completed: the file sink then publishes
  what it sealed there instead of deleting it; null when it never took part:
  its operators go to their initial state); the source last, with a checkpoint
  holding the controller's union of all members' offsets, as the sole
  contributor, so a reset never waits for a member that is dead, removed or
  new. The permit stays blocked until ``resume``.
* ``reset_to_initial {attempt, resolve}``: the same with ``reset_to_initial_state``.

A command that raises is answered ``ok: false`` with the error text (and
``rebalance`` when a group rebalance caused it): the controller resets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from coordinator.protocol.region.commands import (
    Checkpoint,
    CommandKind,
    Drain,
    OffsetList,
    RegionCommand,
    Reset,
    ResetToInitial,
    Resume,
    Retire,
)
from coordinator.protocol.region.transactions import Resolve, Transactions
from cr_consumer.operator.region import CompletionListener, RegionPermit, StateHandler, TransactionalOperator
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.member.control import ControlChannel
from cr_consumer.runtime.member.reset_watch import ResetPendingWatch
from cr_consumer.runtime.member.setup import caused_by_rebalance
from cr_consumer.runtime.pipeline.checkpoint_store import CheckpointNotFound, DirectoryCheckpointStore

if TYPE_CHECKING:
    from cr_consumer.operator.consumer import ConsumerOperator

log = logging.getLogger(__name__)

#: The source's operator id: first in the store's order, before every pipeline operator's.
SOURCE_ID = "00-source"
#: Resolves a reset's Kafka transactions (``kafka_python.transactions.resolve`` with the member's
#: Kafka settings); raises when one cannot be resolved.
Resolver = Callable[[tuple[Resolve, ...]], None]
#: Completed checkpoints remembered (for status and tests): bounded memory.
COMPLETED_KEPT = 100
#: The ``command`` of the ack a command gets (the unlisted ones are not answered).
ACKED_AS = {
    CommandKind.DRAIN: CommandKind.DRAIN,
    CommandKind.CHECKPOINT: CommandKind.CHECKPOINT,
    CommandKind.RESET: CommandKind.RESET,
    CommandKind.RESET_TO_INITIAL: CommandKind.RESET,
}


class CommandExecutor:
    """Executes commands (see the module docstring) on the control thread.

    Shared thread state: ``broken`` is written by the process thread
    (:meth:`mark_broken`, a batch the pipeline failed on) and cleared by the
    control thread (a reset); both read it. ``completed`` and ``resets`` are the
    control thread's only.
    """

    broken: BaseException | None
    completed: list[int]
    resets: int

    def __init__(
        self,
        member: str,
        source: ConsumerOperator,
        operators: list[tuple[str, StateHandler]],
        store: DirectoryCheckpointStore,
        permit: RegionPermit,
        channel: ControlChannel,
        reset_watch: ResetPendingWatch,
        drain_timeout_s: float,
        resolver: Resolver,
    ) -> None:
        self.member = member
        self.source = source
        self.operators = operators
        self.store = store
        self.permit = permit
        self.channel = channel
        self.reset_watch = reset_watch
        self.drain_timeout_s = drain_timeout_s
        self.resolver = resolver
        self.broken = None
        self.completed = []
        self.resets = 0

    def mark_broken(self, exc: BaseException) -> None:
        """Process thread: the pipeline failed on a batch; the next drain fails, a reset clears it."""
        self.broken = exc

    def execute(self, cmd: RegionCommand) -> None:
        """Run one command and answer it (a failure is answered, never raised)."""
        seq, attempt = _ids(cmd)
        t0 = time.monotonic()
        try:
            match cmd:
                case Drain():
                    self._drain(cmd.seq)
                    self.channel.ack(CommandKind.DRAIN, seq=seq)
                    fault_points.hit(fault_points.Point.AFTER_DRAIN, self.member)
                case Checkpoint():
                    offsets, transactions = self._checkpoint(cmd.seq)
                    fault_points.hit(fault_points.Point.BEFORE_CHECKPOINT_ACK, self.member)
                    self.channel.ack(CommandKind.CHECKPOINT, seq=seq, offsets=offsets, transactions=transactions)
                    fault_points.hit(fault_points.Point.AFTER_CHECKPOINT_ACK, self.member)
                case Resume():
                    self._resume(cmd.complete, cmd.offsets)
                case Retire():
                    self.source.retire_checkpoint(cmd.seq)
                    for _, op in self.operators:
                        op.retire_checkpoint(cmd.seq)
                    self.store.retire(cmd.seq)
                case Reset():
                    self._reset(cmd.seq, cmd.attempt, cmd.own, cmd.offsets, cmd.resolve)
                    fault_points.hit(fault_points.Point.AFTER_RESET, self.member)
                    self.channel.ack(CommandKind.RESET, seq=seq, attempt=attempt)
                case ResetToInitial():
                    self._reset_initial(cmd.attempt, cmd.resolve)
                    fault_points.hit(fault_points.Point.AFTER_RESET, self.member)
                    self.channel.ack(CommandKind.RESET, seq=None, attempt=attempt)
        except Exception as exc:  # answered as a failed ack: the controller resets or retries
            log.exception("%s: %s(seq=%s, attempt=%s) failed", self.member, cmd.KIND.value, seq, attempt)
            acked = ACKED_AS.get(cmd.KIND)
            if acked is not None:
                self.channel.ack(
                    acked,
                    seq=seq,
                    attempt=attempt,
                    ok=False,
                    error=f"{type(exc).__name__}: {exc}"[:2000],
                    rebalance=caused_by_rebalance(exc),
                )
            return
        log.debug(
            "%s: %s(seq=%s, attempt=%s) done in %.1f ms",
            self.member,
            cmd.KIND.value,
            seq,
            attempt,
            (time.monotonic() - t0) * 1000,
        )

    def publish(self, complete: int, *, keep_going: bool = False) -> None:
        """``notify_checkpoint_complete(complete)`` on every pipeline operator.
        ``keep_going`` (a graceful leave publishing what its own last completed
        checkpoint covers): an operator that raises is logged and the others
        still publish."""
        for op_id, op in self.operators:
            if not isinstance(op, CompletionListener):  # optional: see CompletionListener
                continue
            try:
                op.notify_checkpoint_complete(complete)
            except Exception:
                if not keep_going:
                    raise
                log.exception("%s: %s could not publish checkpoint %s", self.member, op_id, complete)

    # ------------------------------------------------------------------ the commands
    def _block(self, what: str) -> None:
        if not self.permit.block(self.drain_timeout_s):
            raise TimeoutError(f"{what}: the in-flight batch did not finish within {self.drain_timeout_s}s")

    def _drain(self, seq: int) -> None:
        self._block(f"drain {seq}")
        if self.broken is not None:
            raise RuntimeError(
                f"the pipeline failed since the last reset ({self.broken!r}); checkpoint {seq} would lose records"
            )
        self.source.drain()
        for _, op in self.operators:
            op.drain()

    def _checkpoint(self, seq: int) -> tuple[OffsetList, Transactions | None]:
        from cr_consumer.operator.checkpoint import OperatorCheckpoint

        data = self.source.checkpoint(seq)
        self.store.save(seq, SOURCE_ID, data)
        ckpt = OperatorCheckpoint.decode(data)
        offsets: OffsetList = ckpt.claims()  # [topic, partition, from, to]: coordinator/region/continuity.py
        transactions: Transactions | None = None
        for op_id, op in self.operators:
            self.store.save(seq, op_id, op.checkpoint(seq))
            if isinstance(op, TransactionalOperator):
                mine = op.transactions()
                transactions = mine if transactions is None else transactions + mine
        self.store.seal(seq)
        return offsets, transactions

    def _resolve(self, entries: tuple[Resolve, ...]) -> None:
        """A reset's step before its operators reset: the Kafka transactions it names are
        committed or fenced (the permit is blocked: no batch writes meanwhile)."""
        if entries:
            self.resolver(entries)

    def _resume(self, complete: int | None, offsets: OffsetList | None) -> None:
        if complete is not None and offsets is not None:
            self._set_source_offsets(complete, offsets)
        # Unblock first: publishing (renames + a directory fsync) does not touch the
        # interval that starts now, and a crash before it is covered by the reset,
        # which publishes every interval of the checkpoint it resets to.
        self.permit.unblock()
        if complete is not None:
            self.publish(complete)
            self.completed.append(complete)
            del self.completed[:-COMPLETED_KEPT]

    def _set_source_offsets(self, seq: int, offsets: OffsetList) -> None:
        """The source seeks a partition assigned to it later (without a reset) to its
        offset in the LAST consistent checkpoint, not the one of its last reset
        (which the retire of older checkpoints drops; the partition would then
        start at its initial offset and repeat published records)."""
        from cr_consumer.kafka.client import TopicPartition

        self.source.set_consistent_offsets(seq, {TopicPartition(t, p): int(o) for t, p, o in offsets})

    def _reset(
        self, seq: int, attempt: int, own: int | None, offsets: OffsetList, resolve: tuple[Resolve, ...] = ()
    ) -> None:
        """Reset to the region's checkpoint ``seq``: every pipeline operator to its
        own data of ``own``, this member's last completed checkpoint (``seq``
        itself, an earlier one when this member was away while ``seq``
        completed, None when it never took part: initial state), then the
        source to ``offsets`` (the union of every member's source offsets at
        ``seq``). So the file sink publishes every interval sealed up to ``own``
        (their records lie below the offsets the region continues from) and
        deletes only later ones."""
        from cr_consumer.kafka.client import TopicPartition
        from cr_consumer.operator.checkpoint import OperatorCheckpoint

        self._block(f"reset to {seq}")
        self._resolve(resolve)
        if own is not None and own != seq:
            log.info(
                "%s: reset to checkpoint %s; this member's operators go back to its own checkpoint %s "
                "(it was away when later ones completed)",
                self.member,
                seq,
                own,
            )
        for op_id, op in reversed(self.operators):
            if own is None:
                op.reset_to_initial_state(attempt)
                continue
            try:
                data = self.store.load(own, op_id)
            except CheckpointNotFound as exc:
                raise RuntimeError(
                    f"{self.member} took part in checkpoint {own} but its data "
                    f"for {op_id} is gone from {self.store.root}: {exc}"
                ) from None
            op.reset(own, data, attempt)
        merged = {TopicPartition(t, p): int(o) for t, p, o in offsets}
        self.source.reset(seq, OperatorCheckpoint(self.member, (self.member,), merged).encode(), attempt)
        self._reset_done()

    def _reset_initial(self, attempt: int, resolve: tuple[Resolve, ...] = ()) -> None:
        self._block("reset to initial state")
        self._resolve(resolve)
        for _, op in reversed(self.operators):
            op.reset_to_initial_state(attempt)
        self.source.reset_to_initial_state(attempt)
        self._reset_done()

    def _reset_done(self) -> None:
        self.broken = None
        self.resets += 1
        self.reset_watch.reset_done(time.monotonic())


def _ids(cmd: RegionCommand) -> tuple[int | None, int | None]:
    """(seq, attempt) of a command, for its ack and log lines."""
    match cmd:
        case Drain(seq=seq) | Checkpoint(seq=seq) | Retire(seq=seq):
            return seq, None
        case Reset(seq=seq, attempt=attempt):
            return seq, attempt
        case ResetToInitial(attempt=attempt):
            return None, attempt
    return None, None
