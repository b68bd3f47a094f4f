"""A region member without Kafka, for tests of the region controller over real ZeroMQ.

It joins through the runtime's real control channel (``ControlChannel``) and
answers the controller's commands the way a healthy member process does:

1. ``drain``: acked (``ok`` False with an error when ``fail_drain``);
2. ``checkpoint``: acked with one claim ``[topic, partition, from, to]`` per
   ``[topic, partition, to]`` that ``checkpoint_offsets(seq)`` returns, ``from``
   being the partition's offset in the last ``reset`` or ``resume`` (the
   region's last consistent one; ``to`` for a partition the region has none
   for), so that every interval continues the last consistent checkpoint; or
   with the claims ``checkpoint_claims(seq)`` returns as they are; with
   ``checkpoint_transactions``, the answer also carries the Kafka transactions
   it returns for ``seq`` and is sent as a plain request (``CoordinatorClient``,
   which the controller accepts from any socket naming the member and its
   incarnation, as it does the channel's); an error reply or none within
   ``ACK_TIMEOUT_S`` is recorded in ``errors``, like a lost answer;
3. ``reset`` / ``reset_to_initial``: acked, unless ``answer_resets`` is False
   (a member stuck in its reset);
4. every command is recorded in ``seen``.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from coordinator.client import CoordinatorClient
from coordinator.protocol.region.commands import (
    Checkpoint,
    CommandKind,
    Drain,
    RegionCommand,
    Reset,
    ResetToInitial,
    Resume,
)
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.messages import RegionAck
from coordinator.protocol.region.status import RegionReport, RegionStatus
from coordinator.protocol.region.transactions import Transactions
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from cr_consumer.runtime.member.control import ControlChannel

#: How long stop() waits for the answering thread (it polls its queue every 0.1 s).
STOP_TIMEOUT_S = 5.0
#: How long start() waits for the region's answer to the join: a test asking the
#: coordinator about the region before the join reached it finds no region.
JOIN_TIMEOUT_S = 15.0
#: How long a checkpoint answer sent as a request waits for its reply: bounds the
#: answering thread's stall while the coordinator is down (a killed coordinator);
#: below STOP_TIMEOUT_S, so stop() closes the client only after the thread ended.
ACK_TIMEOUT_S = 3.0


def no_offsets(seq: int) -> list[list[Any]]:
    return []


class ScriptedMember:
    def __init__(
        self,
        endpoint: str,
        region: str,
        name: str,
        config: dict,
        *,
        incarnation: str | None = None,
        fail_drain: bool = False,
        answer_resets: bool = True,
        checkpoint_offsets: Callable[[int], list[list[Any]]] = no_offsets,
        checkpoint_claims: Callable[[int], list[list[Any]]] | None = None,
        checkpoint_transactions: Callable[[int], Transactions | None] | None = None,
    ) -> None:
        self.name = name
        self.region = region
        self.incarnation = incarnation or f"inc-{name}"
        self._checkpoint_transactions = checkpoint_transactions
        self._client = (
            CoordinatorClient(endpoint, timeout=ACK_TIMEOUT_S) if checkpoint_transactions is not None else None
        )
        #: Checkpoint answers sent as requests that got an error or no reply.
        self.errors: list[CoordinatorError | CoordinatorUnavailable] = []
        self.fail_drain = fail_drain
        self.answer_resets = answer_resets
        self._checkpoint_offsets = checkpoint_offsets
        self._checkpoint_claims = checkpoint_claims
        #: The region's offsets of the last reset or resume: where the next intervals begin.
        self._consistent: dict[tuple[str, int], int] = {}
        self.seen: list[dict] = []
        self.commands: queue.SimpleQueue[RegionCommand] = queue.SimpleQueue()
        self.channel = ControlChannel(
            endpoint,
            region,
            name,
            self.incarnation,
            RegionConfig.from_dict({**config, "name": region}),
            self.commands.put,
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self) -> ScriptedMember:
        """Start answering and return once the region answered the join (joined,
        or refused for good: ``channel.failure``), so the region exists."""
        self.channel.start()
        self._thread.start()
        if not self.channel.wait_joined(JOIN_TIMEOUT_S) and self.channel.failure is None:
            self.stop()
            raise TimeoutError(f"{self.name}: no answer to region_join within {JOIN_TIMEOUT_S:g}s")
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                command = self.commands.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(command.to_body())
            match command:
                case Drain(seq=seq):
                    self.channel.ack(
                        CommandKind.DRAIN,
                        seq=seq,
                        ok=not self.fail_drain,
                        error="sink refused the batch" if self.fail_drain else None,
                    )
                case Checkpoint(seq=seq):
                    self._checkpoint_ack(seq)
                case Reset() | ResetToInitial():
                    offsets = command.offsets if isinstance(command, Reset) else []
                    self._consistent = {(t, p): o for t, p, o in offsets}
                    if self.answer_resets:
                        self.channel.ack(
                            CommandKind.RESET,
                            seq=command.seq if isinstance(command, Reset) else None,
                            attempt=command.attempt,
                        )
                case Resume(offsets=offsets) if offsets is not None:
                    self._consistent = {(t, p): o for t, p, o in offsets}

    def _checkpoint_ack(self, seq: int) -> None:
        """Step 2: the checkpoint answer, with the transactions when there are some."""
        if self._client is None or self._checkpoint_transactions is None:
            self.channel.ack(CommandKind.CHECKPOINT, seq=seq, offsets=self._claims(seq))
            return
        ack = RegionAck(
            self.region,
            self.name,
            self.incarnation,
            CommandKind.CHECKPOINT,
            seq,
            None,
            True,
            None,
            self._claims(seq),
            transactions=self._checkpoint_transactions(seq),
        )
        try:
            self._client.request(RegionAck.TYPE, ack.to_body())
        except (CoordinatorError, CoordinatorUnavailable) as exc:  # a lost answer: the phase times out
            self.errors.append(exc)

    def _claims(self, seq: int) -> list[list[Any]]:
        """Step 2: the checkpoint answer's claims."""
        if self._checkpoint_claims is not None:
            return self._checkpoint_claims(seq)
        return [[t, p, self._consistent.get((t, p), o), o] for t, p, o in self._checkpoint_offsets(seq)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)
        self.channel.stop(leave=False)
        if self._client is not None:
            self._client.close()


#: A region that checkpoints every 0.3 s and gives up after two consecutive resets
#: (the status page's and ``crkafka status``'s tests). A ``fail_drain`` member fails
#: it by its answers, no timeout involved; the timeouts only bound how late a healthy
#: member's answer and heartbeat may be, and a late one resets (twice: fails) a region
#: those tests show as running, so they leave room for a loaded machine (a Chromium
#: or a CLI process starting next to the test's answering threads).
FAST_REGION = {
    "period_s": 0.3,
    "drain_timeout_s": 10.0,
    "reset_timeout_s": 10.0,
    "member_timeout_s": 10.0,
    "max_consecutive_resets": 2,
    "min_members": 1,
    "join_grace_s": 1.0,
}


def member(endpoint: str, region: str, name: str, *, partition: int = 0, fail_drain: bool = False) -> ScriptedMember:
    """A member of a ``FAST_REGION`` region whose checkpoint is offset ``seq * 10`` of
    ``orders[partition]`` (members of one region own different partitions: two
    members processing one partition fail the continuity fence)."""
    return ScriptedMember(
        endpoint,
        region,
        name,
        FAST_REGION,
        incarnation=f"inc-{os.getpid()}-{name}",
        fail_drain=fail_drain,
        checkpoint_offsets=lambda seq: [["orders", partition, seq * 10]],
    )


def all_regions(endpoint: str) -> dict[str, RegionStatus]:
    """Every region's status, by name."""
    with CoordinatorClient(endpoint, timeout=5.0) as client:
        return client.regions_status(5.0)


def region_status(endpoint: str, region: str) -> RegionReport:
    """The controller's ``region_status`` reply about ``region``: its status and recent events."""
    with CoordinatorClient(endpoint, timeout=5.0) as client:
        return client.region_status(region, 5.0)
