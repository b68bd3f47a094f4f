"""``cr-coordinator``'s default command: run the coordinator process in the foreground.

Start-up, in order:

1. Arguments are checked (``checks.py``, before ``serve``); a bad one fails there, naming the flag. A bind to a
   non-loopback address is refused unless CURVE is on or ``--allow-remote``;
   ``--http`` on a non-loopback address is refused unless ``--allow-remote``
   (CURVE does not cover HTTP: /status would be open to the network).
   ``--fault-point STEP:ACTION`` (a test and drill aid,
   ``coordinator.store.fault_point``) installs its hook here, before the store exists.
2. The state dir is created 0700 if missing and checked (no symlink, owned by
   this user, not writable by others: ``security.prepare_state_dir``), then
   locked (``coordinator.store.log.recovery.hold_state_dir``): a second coordinator on the same
   directory fails here, before it binds or prints ``ready``. The state store
   is opened on its log: the segment file in the directory (``--state file``,
   the default), or the Kafka topic ``--log-topic`` (``--state kafka``,
   ``coordinator.store.kafka``; the directory then holds only the lock). With
   ``--standby`` the load follows the topic until the leader stops writing for
   ``--log-lease``, then takes over (docs/durable-state.md); until then every
   request gets NOT_LEADER naming the leader's endpoint (LOAD_IN_PROGRESS while it
   knows none). The endpoint a leader names in its lease records is the bound one,
   or ``--advertise`` (required when ``--bind`` is a wildcard address).
3. With CURVE, the ZAP authenticator thread starts before the socket binds.
4. The soft file descriptor limit is raised to the hard one; the server binds
   with its connection limits (``coordinator.server.connections``) and starts its loop; the store's log is replayed in the
   background (requests get LOAD_IN_PROGRESS meanwhile).
5. ``--http`` starts the /metrics and /status endpoint.
6. One line ``ready endpoint=... http=... pid=...`` is printed on stdout, so
   launchers can wait for it.
7. Once the state is loaded, ``--gc-policy`` (default ``freeze``) is applied:
   the loaded heap leaves the garbage collector's scans
   (``coordinator.protocol.common.gc_policy``: full collections stalled the loop).

Shutdown on SIGTERM/SIGINT: stop the loop (queued replies are flushed, pending
writes synced), close the store (flush + fsync), stop HTTP and the
authenticator; exit 0. A fatal failure (load or sync error) exits 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import zmq

from coordinator import security
from coordinator.cli.flags import limits_from_args
from coordinator.protocol import curve_keys
from coordinator.protocol.common.gc_policy import GcPolicy, freeze_after_start
from coordinator.region.service import RegionControllerService
from coordinator.server.api import CurveServerConfig
from coordinator.server.connections import raise_nofile_limit
from coordinator.server.http import HttpEndpoint
from coordinator.server.loop import CoordinatorServer
from coordinator.server.metrics import CoordinatorMetrics
from coordinator.services.merge import MergeService
from coordinator.services.registry import ControlVariablesService, RegistryService
from coordinator.store import fault_point

log = logging.getLogger(__name__)


def _hold_state_dir(path: Path) -> Callable[[], None]:
    """Create/check the state dir and lock it for this process; returns the release function."""
    from coordinator.store.log.recovery import hold_state_dir

    security.prepare_state_dir(path)
    return hold_state_dir(path)


def serve(args: argparse.Namespace) -> int:
    if args.fault_point is not None:
        log.warning("fault point %s installed (a test and drill aid)", args.fault_point)
        fault_point.install(args.fault_point)
    raise_nofile_limit()
    release_state_dir = _hold_state_dir(Path(args.state_dir))
    try:
        return _serve_locked(args)
    finally:
        release_state_dir()


def _serve_locked(args: argparse.Namespace) -> int:
    from coordinator.store.kafka.kafka_log import KafkaLog
    from coordinator.store.state_store import StateStore

    ctx = zmq.Context()
    curve_cfg = None
    auth = None
    if args.curve_secret_key:
        public, secret = curve_keys.load_keypair(args.curve_secret_key)
        allowed = security.load_allow_list(args.curve_allow)
        curve_cfg = CurveServerConfig(public_key=public, secret_key=secret)
        auth = security.CurveAuthenticator(ctx, allowed)
        auth.start()
    log_backend = KafkaLog(args.kafka_settings, standby=args.standby) if args.kafka_settings is not None else None
    store = StateStore(
        Path(args.state_dir),
        retention_s=args.retention,
        truncate_corrupt=args.truncate_corrupt,
        log=log_backend,
        compact_dead_ratio=args.compact_dead_ratio,
        compact_min_bytes=args.compact_min_bytes,
    )
    metrics = CoordinatorMetrics()
    server = CoordinatorServer(
        store,
        args.bind,
        max_frame_bytes=args.max_frame_bytes,
        curve=curve_cfg,
        context=ctx,
        metrics=metrics,
        expire_interval_s=args.expire_interval,
        connection_limits=args.connection_limits,
        limits=limits_from_args(args),
        leadership=log_backend,
        advertise=args.advertise,
    )
    registry = RegistryService()
    server.add_service(registry)
    server.add_service(ControlVariablesService(registry))
    server.add_service(MergeService(registry))
    server.add_service(RegionControllerService(args.resolve_kafka_config))

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    http = None
    try:
        endpoint = server.start()
        log.info(
            "coordinator bound to %s, advertised as %s (state dir %s, CURVE %s)",
            endpoint,
            server.advertised,
            args.state_dir,
            "on" if curve_cfg else "off",
        )
        if args.http:
            http = HttpEndpoint(args.http, server, metrics)
            http.start()
        print(f"ready endpoint={endpoint} http={http.address if http else '-'} pid={os.getpid()}", flush=True)
        gc_policy = GcPolicy(args.gc_policy)
        gc_pending = True
        while not stop.wait(0.2):
            if server.wait(0):
                break
            if gc_pending and server.loaded.is_set():  # 7.
                gc_pending = False
                freeze_after_start(gc_policy, "coordinator", level=logging.INFO)
    finally:
        if log_backend is not None:
            log_backend.stop_standby.set()  # a standby still following the log stops (StandbyStopped)
        server.stop()
        try:
            store.close()
        finally:
            if http is not None:
                http.stop()
            if auth is not None:
                auth.stop()
            if not server.running:  # a wedged loop still holds its socket: do not hang in term()
                ctx.term()
    return _exit_code(server.failure, stopped=stop.is_set())


def _exit_code(failure: BaseException | None, *, stopped: bool) -> int:
    """0 after a clean stop (a signal, also to a standby that had not taken over), 1 after a failure."""
    from coordinator.store.kafka.tail import StandbyStopped

    if isinstance(failure, StandbyStopped) and stopped:
        log.info("standby stopped before it took over")
        return 0
    if failure is not None:
        log.error("coordinator stopped after a failure: %s", failure)
        return 1
    log.info("coordinator stopped cleanly")
    return 0
