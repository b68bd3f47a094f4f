"""A member process of a consistent region: one pipeline, one Kafka source.

Start-up:

1. Load the pipeline module (a module name or a ``.py`` path) and call its
   ``build(ctx) -> Pipeline``.
2. Block the region permit: nothing is submitted before the region's first
   RESET/RESUME tells this member where to start.
3. Start the control channel (``control.py``: join, heartbeats, pushed
   commands) and the Kafka source (``ConsumerOperator`` with this member's
   permit; its reset requests and operator-driven triggers go to the channel).
4. Run the control loop on the calling thread (the *control thread*, owned
   here): it takes the controller's commands and executes them in order.

Commands: ``executor.py`` runs them on the operators; ``failed {reason}`` (the
region gave up) ends the loop.

When several commands are queued and one of them is a reset, everything
queued before the last reset is skipped (a reset supersedes them). Between
commands, a source left in CR_RESET_PENDING while the region runs asks for
its reset again, boundedly (``reset_watch.py``).

The member exits with an :class:`~cr_consumer.exit_code.ExitCode` (that module
says what each one means).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.protocol.common.gc_policy import raise_young_threshold, restore_thresholds
from coordinator.protocol.region.commands import RESETS, Failed, RegionCommand
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import Predecessor, RegionPhase
from cr_consumer.exit_code import ExitCode
from cr_consumer.operator.metrics import MetricsEndpoint, merged_registry
from cr_consumer.operator.region import RegionPermit, StateHandler
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.member.control import ControlChannel
from cr_consumer.runtime.member.executor import SOURCE_ID, CommandExecutor
from cr_consumer.runtime.member.group_state import evict_predecessor, group_report, request_rejoin
from cr_consumer.runtime.member.join_state import RegionFatal
from cr_consumer.runtime.member.reset_watch import ResetPendingWatch, WatchAction
from cr_consumer.runtime.member.setup import (
    MemberSettings,
    SettingsError,
    load_build,
    make_source,
    transaction_resolver,
)
from cr_consumer.runtime.pipeline.checkpoint_store import DirectoryCheckpointStore
from cr_consumer.runtime.pipeline.wiring import KafkaSource, Pipeline, PipelineContext

if TYPE_CHECKING:
    from coordinator.client import CoordinatorClient
    from cr_consumer.operator.consumer import ConsumerOperator

log = logging.getLogger(__name__)

#: Control loop wake-up when no command arrives, to notice stop requests and failures.
LOOP_WAIT_S = 0.2
#: Bound on waiting for the region to accept this member at start-up; a
#: coordinator that never answers fails the member (the runner restarts it).
JOIN_TIMEOUT_S = 60.0


class Member:
    """One member process (see the module docstring).

    Threads: the *control thread* (the caller of :meth:`run`) owns the life
    cycle and executes the commands; the source's process thread calls
    :meth:`_submit` with each batch, and its event thread :meth:`request_reset`
    and :meth:`request_drain`; the channel's I/O thread puts commands on
    ``commands``. Shared state: ``commands`` (a thread-safe queue), ``running``
    and the stop event; ``executor.broken`` (see :class:`CommandExecutor`).
    Everything else is written by the control thread before the source starts.
    """

    pipeline: Pipeline | None
    source: ConsumerOperator | None
    channel: ControlChannel | None
    executor: CommandExecutor | None

    def __init__(self, settings: MemberSettings) -> None:
        self.settings = settings
        self.incarnation = uuid.uuid4().hex[:12]
        self.permit = RegionPermit()
        self.commands: queue.SimpleQueue[RegionCommand] = queue.SimpleQueue()
        self._stop = threading.Event()
        #: Set once joined and bootstrapped, when the command loop starts: before it,
        #: a stop request has no loop to notice it (``crkafka member`` interrupts instead).
        self.running = threading.Event()
        self.pipeline = None
        self.source = None
        self.operators: list[tuple[str, StateHandler]] = []  # the pipeline's, by operator id
        self.channel = None
        self.executor = None  # set once the channel exists, before the source starts
        self.reset_watch = ResetPendingWatch()
        self.store = DirectoryCheckpointStore(Path(settings.state_dir) / "checkpoints" / settings.member)
        self.curve: tuple[bytes, bytes, bytes] | None = None
        self._client: CoordinatorClient | None = None  # the source's CURVE client, owned here (closed at shutdown)
        self.metrics_endpoint: MetricsEndpoint | None = None  # /metrics, owned here (stopped at shutdown)
        self._gc_thresholds: tuple[int, int, int] | None = (
            None  # replaced by raise_young_threshold (restored at shutdown)
        )

    # ------------------------------------------------------------------ set-up
    def region_config(self) -> RegionConfig:
        """The region settings this member joins with; SettingsError when unusable."""
        s = self.settings
        try:
            return RegionConfig.from_dict({"index": s.region_index, **s.region, "name": s.group})
        except (TypeError, ValueError) as exc:
            raise SettingsError(f"{s.member}: region settings: {exc}") from None

    def build(self) -> ConsumerOperator:
        """Step 1: the pipeline and the Kafka source (returned); SettingsError when unusable."""
        s = self.settings
        ctx = PipelineContext(
            bootstrap=s.bootstrap,
            group=s.group,
            member=s.member,
            coordinator=s.coordinator,
            output_dir=s.output_dir,
            state_dir=s.state_dir,
            region_index=s.region_index,
            kafka_client=s.kafka_client,
            # arg-type: PipelineContext.params promises str values, but
            # --param gives an int for an integer string (parse_pairs)
            params=dict(s.params),  # type: ignore[arg-type]
        )
        pipeline = load_build(s.pipeline)(ctx)
        if not isinstance(pipeline, Pipeline):
            raise SettingsError(f"{s.pipeline}: build(ctx) returned {type(pipeline).__name__}, not a Pipeline")
        if not isinstance(pipeline.source, KafkaSource):
            raise SettingsError(f"{s.pipeline}: the pipeline needs a KafkaSource (Pipeline(KafkaSource(topics=[...])))")
        self.pipeline = pipeline
        from cr_consumer.runtime.pipeline.partitioned_tables import table_restorer  # lazily: kafka is heavy

        self.source, self._client = make_source(
            s,
            pipeline.source,
            self.region_config(),
            permit=self.permit,
            region=self,
            submit=self._submit,
            curve=self.curve,
            restorer=table_restorer(pipeline.operators),
        )
        self.operators = list(zip(pipeline.operator_ids(), pipeline.operators))
        return self.source

    # ------------------------------------------------------------------ data path (process thread)
    def _submit(self, records: list[Any]) -> None:
        executor, pipeline = self.executor, self.pipeline
        # the source starts after both exist
        assert executor is not None
        assert pipeline is not None
        if executor.broken is not None:
            return  # dropped: the drain fails and the reset replays them
        try:
            pipeline.process_batch(records)
        except Exception as exc:  # turned into a region reset; the next drain fails
            executor.mark_broken(exc)
            log.exception(
                "%s: the pipeline failed on a batch of %d records; requesting a reset",
                self.settings.member,
                len(records),
            )
            if self.channel is not None:
                self.channel.request_reset(force=False, reason=f"{self.settings.member}: pipeline error: {exc!r}")

    # ------------------------------------------------------------------ region object for the source
    def request_reset(self, *, force: bool, reason: str) -> None:
        self.reset_watch.requested(time.monotonic())
        if self.channel is not None:
            self.channel.request_reset(force=force, reason=reason)

    def request_drain(self, *, reason: str) -> bool:
        """Operator-driven: ask the region for a checkpoint; False when no drain of
        this member follows (the source then does not wait for one)."""
        if self.channel is None:
            return False
        return self.channel.trigger()

    def _on_predecessor(self, pred: Predecessor) -> None:
        """A restarted process: remove the dead predecessor's consumer from the group
        before ours joins (group_state.py), so the group rebalances once."""
        member_id = pred.kafka_member_id
        if member_id and self.source is not None:
            evict_predecessor(self.source.config, member_id)

    def _dead_lettered(self) -> int | None:
        """The heartbeat's dead-letter count (the pipeline is built before the channel starts)."""
        return self.pipeline.dead_lettered() if self.pipeline is not None else None

    # ------------------------------------------------------------------ life cycle
    def stop(self) -> None:
        self._stop.set()

    def run(self) -> ExitCode:
        """Build, join, execute commands until stopped; returns the exit code."""
        s = self.settings
        fault_points.hit(fault_points.Point.MEMBER_START, s.member)
        try:
            self.curve = s.curve_keys()
            source = self.build()
            self._serve_metrics(source)
        except SettingsError as exc:
            log.error("%s", exc)
            return ExitCode.CONFIG
        self.permit.block(0.0)  # 2. nothing is submitted before the first reset
        region_config = self.region_config()
        channel = self.channel = ControlChannel(
            s.coordinator,
            s.group,
            s.member,
            self.incarnation,
            region_config,
            self.commands.put,
            curve=self.curve,
            report=lambda: group_report(source),
            dead_letters=self._dead_lettered,
            on_predecessor=self._on_predecessor,
            on_rejoin_hint=lambda: request_rejoin(source),
        )
        executor = self.executor = CommandExecutor(
            s.member,
            source,
            self.operators,
            self.store,
            self.permit,
            channel,
            self.reset_watch,
            region_config.drain_timeout_s,
            transaction_resolver(source),
        )
        channel.start()
        code = ExitCode.ERROR
        try:
            if not channel.wait_joined(JOIN_TIMEOUT_S):
                if channel.failure is not None:
                    log.error("%s", channel.failure)
                    return ExitCode.CONFIG
                log.error(
                    "%s: could not join region %s at %s within %.0fs", s.member, s.group, s.coordinator, JOIN_TIMEOUT_S
                )
                return ExitCode.ERROR
            try:
                source.start()
            except Exception:  # broker or coordinator unreachable: exit 1, the runner restarts us
                log.exception("%s: the Kafka source could not start (bootstrap %s)", s.member, s.bootstrap)
                return ExitCode.ERROR
            log.info(
                "%s: member running (pid incarnation %s), operators %s",
                s.member,
                self.incarnation,
                [SOURCE_ID] + [i for i, _ in self.operators],
            )
            # source.start() applied OperatorConfig.gc_policy (default: freeze the
            # modules, the pipeline and the clients, built above, out of the GC's scans);
            # the records in flight are collected less often (coordinator/protocol/common/gc_policy.py step 3).
            self._gc_thresholds = raise_young_threshold(source.config.gc_policy, s.member)
            self.running.set()
            code = self._loop(source, channel, executor)
            return code
        finally:
            self._shutdown(leave=code == ExitCode.OK)

    def _serve_metrics(self, source: ConsumerOperator) -> None:
        """Serve the source's and the pipeline's registries on --metrics-port (a port in use is a
        bad setting)."""
        s = self.settings
        if s.metrics_port is None:
            return
        assert self.pipeline is not None  # built with the source
        registries = (source.prometheus_registry, self.pipeline.prometheus_registry)
        endpoint = MetricsEndpoint(merged_registry(lambda: registries), s.metrics_port, s.metrics_host)
        try:
            endpoint.start()
        except (OSError, ValueError) as exc:
            raise SettingsError(f"{s.member}: {exc}") from None
        self.metrics_endpoint = endpoint

    def _loop(self, source: ConsumerOperator, channel: ControlChannel, executor: CommandExecutor) -> ExitCode:
        """Step 4: commands in order until stopped, the channel or the source failed,
        or the region FAILED."""
        while not self._stop.is_set():
            if channel.failure is not None:
                log.error("%s: control channel failed: %s", self.settings.member, channel.failure)
                return ExitCode.CONFIG if isinstance(channel.failure, RegionFatal) else ExitCode.ERROR
            failure = source.failure
            if failure is not None:
                log.error("%s: the Kafka source failed: %r", self.settings.member, failure)
                return ExitCode.ERROR
            try:
                first = self.commands.get(timeout=LOOP_WAIT_S)
            except queue.Empty:
                if self._watch_reset_pending(source, channel):
                    return ExitCode.ERROR
                continue
            batch = [first]
            while True:
                try:
                    batch.append(self.commands.get_nowait())
                except queue.Empty:
                    break
            resets = [i for i, c in enumerate(batch) if isinstance(c, RESETS)]
            if resets and resets[-1] > 0:
                skipped = batch[: resets[-1]]
                log.info(
                    "%s: skipping %s (superseded by a later reset)",
                    self.settings.member,
                    [c.KIND.value for c in skipped],
                )
                batch = batch[resets[-1] :]
            for cmd in batch:
                if isinstance(cmd, Failed):
                    log.error("%s: region %s FAILED: %s", self.settings.member, self.settings.group, cmd.reason)
                    return ExitCode.REGION_FAILED
                executor.execute(cmd)
        return ExitCode.OK

    def _watch_reset_pending(self, source: ConsumerOperator, channel: ControlChannel) -> bool:
        """Between commands: a source left in CR_RESET_PENDING asks again
        (reset_watch.py); True when it gave up (the member exits)."""
        from cr_consumer.operator.states import ClientState

        pending = source.state is ClientState.CR_RESET_PENDING
        action = self.reset_watch.check(pending, channel.region_phase() is RegionPhase.RUNNING, time.monotonic())
        if action is WatchAction.REQUEST:
            log.warning(
                "%s: the source still waits for a reset (CR_RESET_PENDING, its request was lost or not "
                "served); asking again (%d of %d)",
                self.settings.member,
                self.reset_watch.requests,
                self.reset_watch.max_requests,
            )
            channel.request_reset(force=True, reason=f"{self.settings.member}: still in CR_RESET_PENDING")
        elif action is WatchAction.GIVE_UP:
            log.error(
                "%s: the source waited for a reset through %d requests; exiting (the restart resets the region)",
                self.settings.member,
                self.reset_watch.max_requests,
            )
            return True
        return False

    def _shutdown(self, leave: bool) -> None:
        """1. stop the source (no more batches); 2. on a graceful stop, leave the
        region and publish what its last consistent checkpoint covers (a RESUME
        naming it may not have been processed); 3. stop the channel; 4. close
        the operators."""
        self.permit.unblock()  # let the source's threads finish their batch and stop
        if self.source is not None:
            self._close(self.source.close)
        if self.channel is not None:
            answer = self.channel.leave() if leave else None
            # Only this process's own last completed checkpoint: what it sealed
            # later may belong to a checkpoint that never completed.
            complete = answer.complete if answer is not None else None
            if complete is not None and self.executor is not None:
                executor = self.executor
                self._close(lambda: executor.publish(complete, keep_going=True))
            self.channel.stop(leave=False)
        if self.pipeline is not None:
            self._close(self.pipeline.close)
        if self._client is not None:
            self._close(self._client.close)
        if self.metrics_endpoint is not None:
            self._close(self.metrics_endpoint.stop)
        restore_thresholds(self._gc_thresholds)

    def _close(self, closer: Callable[[], object]) -> None:
        try:
            closer()
        except Exception:  # logged; the process is ending and the other parts must still close
            log.exception("%s: error while shutting down", self.settings.member)
