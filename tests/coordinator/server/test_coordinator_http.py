"""HTTP /metrics and /status, and ``crkafka status``."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from coordinator.client import CoordinatorClient
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.wire.status import CoordinatorStatus


def _get(address, path):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
        return r.read().decode()


def _metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_metrics_and_status(coordinator_http, names):
    group = names.group()
    addr = coordinator_http.http_address
    with CoordinatorClient(coordinator_http.endpoint, timeout=10) as c:
        c.register(group, 4, "op-a")
        c.register(group, 4, "op-b")
        c.put_initial_offsets(group, {("t", p): p for p in range(5)})
        c.merge_checkpoint(group, 1, 0, 1, "op-a", {("t", 0): 1}, 5.0)
        waiter = threading.Thread(target=lambda: _swallow_timeout(c, group))
        waiter.start()

        def with_pending_merge() -> dict | None:  # the page that showed it: a second fetch may come after its timeout
            status = json.loads(_get(addr, "/status"))
            return status if status["merge"]["pending"] else None

        status = wait_until(with_pending_merge, 5, "a pending merge in /status", interval=0.02)
        waiter.join(10)
        assert not waiter.is_alive()
    # /status is the status reply's encoded form: the client's decoder reads it
    typed = CoordinatorStatus.from_body(status)
    assert typed.loaded is True
    assert typed.registry is not None
    assert typed.merge is not None
    g = typed.registry.groups[group]
    assert (g.region_index, g.members, g.n_members, g.control_variables) == (4, ("op-a", "op-b"), 2, 5)
    assert typed.merge.pending[0].group == group
    assert typed.merge.pending[0].contributors == ("op-b",)
    assert typed.to_body() == status

    # gauges refresh every second
    def refreshed() -> str | None:
        text = _get(addr, "/metrics")
        return text if _metric(text, "crkafka_coordinator_control_variables") == 5 else None

    text = wait_until(refreshed, 5, "the control-variables gauge to refresh", interval=0.1)
    assert _metric(text, 'crkafka_coordinator_requests_total{type="register"}') == 2
    assert _metric(text, "crkafka_coordinator_merges_completed_total") == 1
    assert _metric(text, 'crkafka_coordinator_errors_total{code="TIMEOUT"}') == 1
    assert _metric(text, "crkafka_coordinator_log_bytes") > 0
    assert _metric(text, "crkafka_coordinator_load_duration_seconds") is not None
    assert _metric(text, "crkafka_coordinator_compactions_total") == 0
    with pytest.raises(urllib.error.HTTPError):
        _get(addr, "/nope")


#: How long the test's second merge stays pending before it times out: the window in
#: which /status must be fetched (the thread's start, the request's way to the
#: coordinator and the page's fetch all come out of it, each slower on a loaded machine).
PENDING_MERGE_S = 3.0


def _swallow_timeout(c, group):
    from coordinator.protocol.wire.errors import MergeTimeout

    try:
        c.merge_checkpoint(group, 2, 0, 2, "op-b", {}, PENDING_MERGE_S)
    except MergeTimeout:
        return


def test_crkafka_status_prints_tables(coordinator, names):
    group = names.group()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        c.register(group, 1, "op-x")
        c.put_initial_offsets(group, {("t", 0): 0})
    r = subprocess.run(
        [sys.executable, "-m", "cr_consumer.cli.main", "status", "--coordinator", coordinator.endpoint],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0, r.stderr
    assert group in r.stdout
    assert "op-x" in r.stdout
    assert "pending merges (0" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "cr_consumer.cli.main", "status", "--coordinator", coordinator.endpoint, "--json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert json.loads(r.stdout)["groups"][group]["members"] == ["op-x"]


def test_crkafka_status_unreachable_coordinator_exits_2():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "cr_consumer.cli.main",
            "status",
            "--coordinator",
            "tcp://127.0.0.1:1",
            "--timeout",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "no reply from the coordinator" in r.stderr
