"""Shared fixtures: one Kafka-protocol broker per test session (per xdist worker).

Set KAFKA_BOOTSTRAP_SERVERS to run the whole suite against a real cluster;
otherwise an embedded tansu broker is started on a free loopback port. Tests
use unique topic and group names, so they can share the broker.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The Spark Connect tests load gRPC into the worker, with its threads; the worker also starts
# processes through fork + exec with a pre-exec function (a coordinator dies with its parent).
# gRPC's fork handlers then ran in such a child and aborted it (SIGABRT, "epoll_wait error: Bad
# file descriptor") before the exec. The children exec at once and need no gRPC: no handlers.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from cr_consumer.testing.broker import ENV_BOOTSTRAP, EmbeddedBroker
from cr_consumer.testing.kafka_util import unique_name

from support.group_timeouts import TEST_HEARTBEAT_INTERVAL_MS, TEST_SESSION_TIMEOUT_MS  # noqa: F401

# No per-example deadline (hypothesis's default is 200 ms) and no too_slow health
# check (data generation timed against a bound): both measure the machine, not the
# code. One example of a pure check stalled by a loaded machine's scheduler fails the
# test as flaky (FlakyFailure: it passes when replayed). Each test still bounds its
# examples' sizes, and pytest-timeout bounds the whole test. The rest comes from the
# profile loaded before (hypothesis loads its own "ci" profile where a CI variable is
# set: derandomized, no example database; it leaves out both of these as well).
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory) -> str:
    address = os.environ.get(ENV_BOOTSTRAP)
    if address:
        yield address
        return
    log = tmp_path_factory.mktemp("broker") / "tansu.log"
    with EmbeddedBroker(log_path=log) as broker:
        yield broker.bootstrap


@pytest.fixture
def names(request):
    """Unique topic/group names for one test."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:30]

    class _Names:
        def topic(self, suffix: str = "t") -> str:
            return unique_name(f"{base}-{suffix}")

        def group(self, suffix: str = "g") -> str:
            return unique_name(f"{base}-{suffix}")

    return _Names()


# --- coordinator (a server in this process) -------------------------------------------------
@pytest.fixture
def coordinator(tmp_path):
    """A real cr-coordinator process on a free loopback port, its own state dir.

    Yields the launcher's CoordinatorProcess (``.endpoint``, ``.kill()``,
    ``.restart()``); terminated (SIGTERM) at the end of the test.
    """
    from coordinator.launcher import CoordinatorProcess

    proc = CoordinatorProcess(tmp_path / "coordinator-state")
    proc.start()
    try:
        yield proc
    finally:
        proc.terminate()


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Under ``--dist loadgroup`` every test marked ``xdist_group`` must carry its group in
    its node id (pytest-xdist adds it on each worker): otherwise the Spark tests spread over
    the workers, each starting its own SparkSession, and ``make test`` runs them side by side."""
    if not getattr(config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"xdist_group is not applied to {len(lost)} tests (e.g. {lost[0]}): "
            "check the pytest / pytest-xdist versions"
        )


# --- a test that its own timeout cannot end ---------------------------------------------------
#: How long past a test's own timeout (pytest-timeout's signal method, which also runs the
#: test's fixtures' teardown) the worker waits before it gives the test up. The signal's
#: exception is raised only when the main thread runs Python code: a test blocked in C code,
#: or a teardown that blocks again after the timeout, would otherwise hold its worker, and so
#: the whole run, until CI's own limit ends it without saying which test it was.
ABANDON_GRACE_S = 90.0


def _item_timeout(item: pytest.Item) -> float:
    """The test's timeout: its ``timeout`` marker, else the ini's (0: none)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    if marker is not None and "timeout" in marker.kwargs:
        return float(marker.kwargs["timeout"])
    return float(item.config.getini("timeout") or 0)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc), children before their children."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while being read
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def _abandon(config: pytest.Config, nodeid: str, timeout: float) -> None:
    """Say which test hung, with every thread's stack, end the processes it started and
    this worker (xdist reports the test as failed with the worker's crash and starts a
    new worker for the tests left)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # the test's output capture holds fd 2 until suspended
        capture.suspend_global_capture(in_=True)
    err = sys.stderr
    err.write(
        f"\n*** {nodeid} still running {ABANDON_GRACE_S:.0f} s past its {timeout:.0f} s timeout: "
        "its worker ends here; the stacks follow ***\n"
    )
    faulthandler.dump_traceback(file=err, all_threads=True)
    err.flush()
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os._exit(70)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    timeout = _item_timeout(item)
    if timeout <= 0:
        yield
        return
    timer = threading.Timer(timeout + ABANDON_GRACE_S, _abandon, args=(item.config, item.nodeid, timeout))
    timer.daemon = True
    timer.name = f"abandon-watch {item.nodeid}"[:80]
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
