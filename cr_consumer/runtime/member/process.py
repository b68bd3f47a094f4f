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

Commands (each answered with ``region_ack`` ok / error text):

* ``drain {seq}``: block the permit (drain timeout), then ``drain()`` every
  operator in pipeline order, the source first. A pipeline error since the
  last reset fails the drain (its records were lost, so this interval must
  not become a checkpoint).
* ``checkpoint {seq}``: ``checkpoint(seq)`` every operator, save each in the
  checkpoint store, seal ``seq``; the ack carries the source's offsets.
* ``resume {complete, offsets}``: when a checkpoint completed, the source keeps
  ``offsets`` (the checkpoint's union) for partitions assigned to it later; the
  permit is unblocked; then ``notify_checkpoint_complete(complete)`` on every
  operator (the file sink publishes).
* ``retire {seq}``: ``retire_checkpoint(seq)`` on every operator, delete
  checkpoints <= seq from the store.
* ``reset {seq, attempt, members, offsets, own}``: block the permit; in reverse
  pipeline order ``reset(own, data)`` each operator with its stored data of
  ``own``, this member's own last completed checkpoint (``seq``, or an earlier
  one when it was away while ``seq`` completed: the file sink then publishes
  what it sealed there instead of deleting it; null when it never took part:
  its operators go to their initial state); the source gets a checkpoint holding the
  controller's union of all members' offsets, as the sole contributor, so a
  reset never waits for a member that is dead, removed or new. The permit
  stays blocked until ``resume``.
* ``reset_to_initial {attempt}``: the same with ``reset_to_initial_state``.
* ``failed {reason}``: the region gave up; the member exits with code 3.

When several commands are queued and one of them is a reset, everything
queued before the last reset is skipped (a reset supersedes them). Between
commands, a source left in CR_RESET_PENDING while the region runs asks for
its reset again, boundedly (``reset_watch.py``).

Exit codes: 0 stopped (SIGTERM/SIGINT or :meth:`Member.stop`), 1 the source or
the control channel failed, 2 bad settings, 3 the region FAILED.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from cr_consumer.operator.metrics import MetricsEndpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.runtime.member import fault_points
from cr_consumer.runtime.member.control import ControlChannel
from cr_consumer.runtime.member.group_state import evict_predecessor, group_report, request_rejoin
from cr_consumer.runtime.member.reset_watch import ResetPendingWatch, WatchAction
from cr_consumer.runtime.member.setup import MemberSettings, SettingsError, caused_by_rebalance, load_build
from cr_consumer.runtime.pipeline.checkpoint_store import CheckpointNotFound, DirectoryCheckpointStore
from cr_consumer.runtime.pipeline.wiring import KafkaSource, Pipeline, PipelineContext

log = logging.getLogger(__name__)

EXIT_OK, EXIT_ERROR, EXIT_CONFIG, EXIT_REGION_FAILED = 0, 1, 2, 3
SOURCE_ID = "00-source"
#: Control loop wake-up when no command arrives, to notice stop requests and failures.
LOOP_WAIT_S = 0.2
#: Bound on waiting for the region to accept this member at start-up; a
#: coordinator that never answers fails the member (the runner restarts it).
JOIN_TIMEOUT_S = 60.0


class Member:
    def __init__(self, settings: MemberSettings) -> None:
        self.settings = settings
        self.incarnation = uuid.uuid4().hex[:12]
        self.permit = RegionPermit()
        self.commands: queue.SimpleQueue[dict] = queue.SimpleQueue()
        self._stop = threading.Event()
        #: Set once joined and bootstrapped, when the command loop starts: before it,
        #: a stop request has no loop to notice it (``crkafka member`` interrupts instead).
        self.running = threading.Event()
        self.exit_code: int | None = None
        self.broken: BaseException | None = None  # pipeline error since the last reset
        self.pipeline: Pipeline | None = None
        self.source: Any = None
        self.handlers: list[tuple[str, Any]] = []
        self.channel: ControlChannel | None = None
        self.completed: list[int] = []
        self.resets = 0
        self.reset_watch = ResetPendingWatch()
        region = dict(settings.region)
        region.setdefault("index", settings.region_index)
        self.region_config = region
        self.store = DirectoryCheckpointStore(Path(settings.state_dir) / "checkpoints" / settings.member)
        self.curve: tuple[bytes, bytes, bytes] | None = None
        self._client: Any = None  # the source's CURVE client, owned here (closed at shutdown)
        self.metrics_endpoint: MetricsEndpoint | None = None  # /metrics, owned here (stopped at shutdown)

    # ------------------------------------------------------------------ set-up
    def build(self) -> None:
        s = self.settings
        ctx = PipelineContext(bootstrap=s.bootstrap, group=s.group, member=s.member, coordinator=s.coordinator,
                              output_dir=s.output_dir, state_dir=s.state_dir, region_index=s.region_index,
                              params=dict(s.params))
        pipeline = load_build(s.pipeline)(ctx)
        if not isinstance(pipeline, Pipeline):
            raise SettingsError(f"{s.pipeline}: build(ctx) returned {type(pipeline).__name__}, not a Pipeline")
        if not isinstance(pipeline.source, KafkaSource):
            raise SettingsError(f"{s.pipeline}: the pipeline needs a KafkaSource (Pipeline(KafkaSource(topics=[...])))")
        self.pipeline = pipeline
        self.source = self._make_source(pipeline.source)
        self.handlers = [(SOURCE_ID, self.source)] + list(zip(pipeline.operator_ids(), pipeline.operators))

    def _make_source(self, spec: KafkaSource) -> Any:
        from cr_consumer.operator.config import ConfigError, OperatorConfig
        from cr_consumer.operator.consumer import ConsumerOperator

        s = self.settings
        options = dict(spec.options)
        options.setdefault("drain_timeout_s", float(self.region_config.get("drain_timeout_s", 30.0)))
        options.setdefault("reset_timeout_s", float(self.region_config.get("reset_timeout_s", 30.0)))
        if self.region_config.get("mode") == "operator_driven":
            options.setdefault("region_mode", "operator_driven")
        try:
            config = OperatorConfig(
                bootstrap_servers=s.bootstrap, group_id=s.group, operator_name=s.member, coordinator=s.coordinator,
                topics=spec.topics, pattern=spec.pattern, region_index=s.region_index,
                consumer_properties={**dict(spec.kafka), **dict(s.kafka)}, **options,
            )
        except (ConfigError, TypeError) as exc:
            raise SettingsError(f"{s.pipeline}: Kafka source settings: {exc}") from None
        control = None
        if self.curve is not None:  # the source's own coordinator client must use CURVE too
            from coordinator.client import CoordinatorClient

            server, public, secret = self.curve
            control = self._client = CoordinatorClient(s.coordinator, timeout=config.coordinator_timeout_s,
                                                       curve_server_key=server, curve_keypair=(public, secret))
        return ConsumerOperator(config, submit_batch=self._submit, permit=self.permit, region=self, control=control)

    # ------------------------------------------------------------------ data path (process thread)
    def _submit(self, records: list) -> None:
        if self.broken is not None:
            return  # dropped: the drain fails and the reset replays them
        try:
            self.pipeline.process_batch(records)
        except Exception as exc:  # turned into a region reset; the next drain fails
            self.broken = exc
            log.exception("%s: the pipeline failed on a batch of %d records; requesting a reset",
                          self.settings.member, len(records))
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

    def _on_predecessor(self, pred: dict) -> None:
        """A restarted process: remove the dead predecessor's consumer from the group
        before ours joins (group_state.py), so the group rebalances once."""
        member_id = pred.get("kafka_member_id")
        if member_id and getattr(self.source, "config", None) is not None:
            evict_predecessor(self.source.config, member_id)

    # ------------------------------------------------------------------ life cycle
    def stop(self) -> None:
        self._stop.set()

    def run(self) -> int:
        """Build, join, execute commands until stopped; returns the exit code."""
        s = self.settings
        fault_points.hit(fault_points.Point.MEMBER_START, s.member)
        try:
            self.curve = s.curve_keys()
            self.build()
            self._serve_metrics()
        except SettingsError as exc:
            log.error("%s", exc)
            return EXIT_CONFIG
        self.permit.block(0.0)  # 2. nothing is submitted before the first reset
        self.channel = ControlChannel(s.coordinator, s.group, s.member, self.incarnation, self.region_config,
                                      self.commands.put, curve=self.curve,
                                      report=lambda: group_report(self.source),
                                      on_predecessor=self._on_predecessor,
                                      on_rejoin_hint=lambda: request_rejoin(self.source))
        self.channel.start()
        code = EXIT_ERROR
        try:
            if not self.channel.wait_joined(JOIN_TIMEOUT_S):
                if self.channel.failure is not None:
                    log.error("%s", self.channel.failure)
                    return EXIT_CONFIG
                log.error("%s: could not join region %s at %s within %.0fs", s.member, s.group, s.coordinator,
                          JOIN_TIMEOUT_S)
                return EXIT_ERROR
            try:
                self.source.start()
            except Exception:  # broker or coordinator unreachable: exit 1, the runner restarts us
                log.exception("%s: the Kafka source could not start (bootstrap %s)", s.member, s.bootstrap)
                return EXIT_ERROR
            log.info("%s: member running (pid incarnation %s), operators %s", s.member, self.incarnation,
                     [i for i, _ in self.handlers])
            # source.start() applied OperatorConfig.gc_policy (default: freeze the
            # modules, the pipeline and the clients, built above, out of the GC's scans).
            self.running.set()
            code = self._loop()
            return code
        finally:
            self._shutdown(leave=code == EXIT_OK)

    def _serve_metrics(self) -> None:
        """Serve the source's registry on --metrics-port (a port in use is a bad setting)."""
        s = self.settings
        if s.metrics_port is None:
            return
        endpoint = MetricsEndpoint(self.source.prometheus_registry, s.metrics_port, s.metrics_host)
        try:
            endpoint.start()
        except (OSError, ValueError) as exc:
            raise SettingsError(f"{s.member}: {exc}") from None
        self.metrics_endpoint = endpoint

    def _loop(self) -> int:
        while not self._stop.is_set():
            if self.channel.failure is not None:
                log.error("%s: control channel failed: %s", self.settings.member, self.channel.failure)
                return EXIT_CONFIG if "refused" in str(self.channel.failure) else EXIT_ERROR
            failure = getattr(self.source, "failure", None)
            if failure is not None:
                log.error("%s: the Kafka source failed: %r", self.settings.member, failure)
                return EXIT_ERROR
            try:
                first = self.commands.get(timeout=LOOP_WAIT_S)
            except queue.Empty:
                if self._watch_reset_pending():
                    return EXIT_ERROR
                continue
            batch = [first]
            while True:
                try:
                    batch.append(self.commands.get_nowait())
                except queue.Empty:
                    break
            resets = [i for i, c in enumerate(batch) if c.get("cmd") in ("reset", "reset_to_initial")]
            if resets and resets[-1] > 0:
                skipped = batch[: resets[-1]]
                log.info("%s: skipping %s (superseded by a later reset)", self.settings.member,
                         [c.get("cmd") for c in skipped])
                batch = batch[resets[-1]:]
            for cmd in batch:
                if cmd.get("cmd") == "failed":
                    log.error("%s: region %s FAILED: %s", self.settings.member, self.settings.group, cmd.get("reason"))
                    return EXIT_REGION_FAILED
                self._execute(cmd)
        return EXIT_OK

    def _watch_reset_pending(self) -> bool:
        """Between commands: a source left in CR_RESET_PENDING asks again
        (reset_watch.py); True when it gave up (the member exits)."""
        from cr_consumer.operator.states import ClientState

        pending = getattr(self.source, "state", None) is ClientState.CR_RESET_PENDING
        action = self.reset_watch.check(pending, self.channel.region_phase() == "RUNNING", time.monotonic())
        if action is WatchAction.REQUEST:
            log.warning("%s: the source still waits for a reset (CR_RESET_PENDING, its request was lost or not "
                        "served); asking again (%d of %d)", self.settings.member, self.reset_watch.requests,
                        self.reset_watch.max_requests)
            self.channel.request_reset(force=True, reason=f"{self.settings.member}: still in CR_RESET_PENDING")
        elif action is WatchAction.GIVE_UP:
            log.error("%s: the source waited for a reset through %d requests; exiting (the restart resets the "
                      "region)", self.settings.member, self.reset_watch.max_requests)
            return True
        return False

    def _shutdown(self, leave: bool) -> None:
        """1. stop the source (no more batches); 2. on a graceful stop, leave the
        region and publish what its last consistent checkpoint covers (a RESUME
        naming it may not have been processed); 3. stop the channel; 4. close
        the operators."""
        self.permit.unblock()  # let the source's threads finish their batch and stop
        self._close(getattr(self.source, "close", None))
        if self.channel is not None:
            answer = self.channel.leave() if leave else None
            # Only this process's own last completed checkpoint: what it sealed
            # later may belong to a checkpoint that never completed.
            complete = (answer or {}).get("complete")
            if complete is not None:
                for op_id, h in self.handlers:
                    notify = getattr(h, "notify_checkpoint_complete", None)
                    if op_id != SOURCE_ID and notify is not None:
                        self._close(lambda n=notify: n(complete))
            self.channel.stop(leave=False)
        self._close(getattr(self.pipeline, "close", None))
        self._close(getattr(self._client, "close", None))
        if self.metrics_endpoint is not None:
            self._close(self.metrics_endpoint.stop)

    def _close(self, closer) -> None:
        if closer is None:
            return
        try:
            closer()
        except Exception:  # logged; the process is ending and the other parts must still close
            log.exception("%s: error while shutting down", self.settings.member)

    # ------------------------------------------------------------------ commands (control thread)
    def _execute(self, cmd: dict) -> None:
        kind = cmd.get("cmd")
        seq, attempt = cmd.get("seq"), cmd.get("attempt")
        t0 = time.monotonic()
        try:
            if kind == "drain":
                self._drain(seq)
                self.channel.ack("drain", seq=seq)
                fault_points.hit(fault_points.Point.AFTER_DRAIN, self.settings.member)
            elif kind == "checkpoint":
                offsets = self._checkpoint(seq)
                self.channel.ack("checkpoint", seq=seq, offsets=offsets)
                fault_points.hit(fault_points.Point.AFTER_CHECKPOINT_ACK, self.settings.member)
            elif kind == "resume":
                self._resume(cmd.get("complete"), cmd.get("offsets"))
            elif kind == "retire":
                for _, h in self.handlers:
                    h.retire_checkpoint(seq)
                self.store.retire(seq)
            elif kind == "reset":
                members = cmd.get("members") or []
                own = cmd["own"] if "own" in cmd else (seq if self.settings.member in members else None)
                self._reset(seq, attempt, own, cmd.get("offsets") or [])
                fault_points.hit(fault_points.Point.AFTER_RESET, self.settings.member)
                self.channel.ack("reset", seq=seq, attempt=attempt)
            elif kind == "reset_to_initial":
                self._reset_initial(attempt)
                fault_points.hit(fault_points.Point.AFTER_RESET, self.settings.member)
                self.channel.ack("reset", seq=None, attempt=attempt)
            else:
                log.warning("%s: unknown command %r ignored", self.settings.member, cmd)
                return
        except Exception as exc:  # answered as a failed ack: the controller resets or retries
            log.exception("%s: %s(seq=%s, attempt=%s) failed", self.settings.member, kind, seq, attempt)
            if kind in ("drain", "checkpoint", "reset", "reset_to_initial"):
                self.channel.ack("reset" if kind == "reset_to_initial" else kind, seq=seq, attempt=attempt,
                                 ok=False, error=f"{type(exc).__name__}: {exc}"[:2000],
                                 rebalance=caused_by_rebalance(exc))
            return
        log.debug("%s: %s(seq=%s, attempt=%s) done in %.1f ms", self.settings.member, kind, seq, attempt,
                  (time.monotonic() - t0) * 1000)

    def _block(self, what: str) -> None:
        timeout = float(self.region_config.get("drain_timeout_s", 30.0))
        if not self.permit.block(timeout):
            raise TimeoutError(f"{what}: the in-flight batch did not finish within {timeout}s")

    def _drain(self, seq: int) -> None:
        self._block(f"drain {seq}")
        if self.broken is not None:
            raise RuntimeError(f"the pipeline failed since the last reset ({self.broken!r}); "
                               f"checkpoint {seq} would lose records")
        for _, h in self.handlers:
            h.drain()

    def _checkpoint(self, seq: int) -> list:
        from cr_consumer.operator.checkpoint import OperatorCheckpoint

        offsets: list = []
        for op_id, h in self.handlers:
            data = h.checkpoint(seq)
            self.store.save(seq, op_id, data)
            if op_id == SOURCE_ID:
                ckpt = OperatorCheckpoint.decode(data)
                offsets = [[tp.topic, tp.partition, int(o)] for tp, o in sorted(ckpt.offsets.items())]
        self.store.seal(seq)
        return offsets

    def _resume(self, complete: int | None, offsets: list | None = None) -> None:
        if complete is not None and offsets is not None:
            self._set_source_offsets(complete, offsets)
        # Unblock first: publishing (renames + a directory fsync) does not touch the
        # interval that starts now, and a crash before it is covered by the reset,
        # which publishes every interval of the checkpoint it resets to.
        self.permit.unblock()
        if complete is not None:
            for _, h in self.handlers:
                notify = getattr(h, "notify_checkpoint_complete", None)
                if notify is not None:
                    notify(complete)
            self.completed.append(complete)
            del self.completed[:-100]

    def _set_source_offsets(self, seq: int, offsets: list) -> None:
        """The source seeks a partition assigned to it later (without a reset) to its
        offset in the LAST consistent checkpoint, not the one of its last reset
        (which the retire of older checkpoints drops; the partition would then
        start at its initial offset and repeat published records)."""
        from kafka import TopicPartition

        merged = {TopicPartition(t, p): int(o) for t, p, o in offsets}
        setter = getattr(self.source, "set_consistent_offsets", None)
        if setter is not None:
            setter(seq, merged)
        elif hasattr(self.source, "_merged"):
            # ConsumerOperator keeps the map of its last reset there (see handlers.py).
            self.source._merged = (seq, merged)

    def _reset(self, seq: int, attempt: int, own: int | None, offsets: list) -> None:
        """Reset to the region's checkpoint ``seq``: the source to ``offsets`` (the
        union of every member's source offsets at ``seq``); every other operator
        to its own data of ``own``, this member's last completed checkpoint
        (``seq`` itself, an earlier one when this member was away while ``seq``
        completed, None when it never took part: initial state). So the file sink
        publishes every interval sealed up to ``own`` (their records lie below
        the offsets the region continues from) and deletes only later ones."""
        from kafka import TopicPartition

        from cr_consumer.operator.checkpoint import OperatorCheckpoint

        if own is not None and (not isinstance(own, int) or isinstance(own, bool) or own > seq):
            raise ValueError(f"reset to {seq}: own checkpoint {own!r} must be a checkpoint id <= {seq}")
        self._block(f"reset to {seq}")
        if own is not None and own != seq:
            log.info("%s: reset to checkpoint %s; this member's operators go back to its own checkpoint %s "
                     "(it was away when later ones completed)", self.settings.member, seq, own)
        for op_id, h in reversed(self.handlers):
            if op_id == SOURCE_ID:
                merged = {TopicPartition(t, p): int(o) for t, p, o in offsets}
                data = OperatorCheckpoint(self.settings.member, (self.settings.member,), merged).encode()
                h.reset(seq, data, attempt)
            elif own is not None:
                try:
                    data = self.store.load(own, op_id)
                except CheckpointNotFound as exc:
                    raise RuntimeError(f"{self.settings.member} took part in checkpoint {own} but its data "
                                       f"for {op_id} is gone from {self.store.root}: {exc}") from None
                h.reset(own, data, attempt)
            else:
                h.reset_to_initial_state(attempt)
        self.broken = None
        self.resets += 1
        self.reset_watch.reset_done(time.monotonic())

    def _reset_initial(self, attempt: int) -> None:
        self._block("reset to initial state")
        for _, h in reversed(self.handlers):
            h.reset_to_initial_state(attempt)
        self.broken = None
        self.resets += 1
        self.reset_watch.reset_done(time.monotonic())
