"""Stopping the HTTP endpoint is bounded whatever state it is in: stop() of an
endpoint whose thread never started (its start failed, or was never called)
returns at once and frees the port, instead of waiting for a serve loop that
will never acknowledge the shutdown."""

from __future__ import annotations

import socket
import threading

from coordinator.server.http import HttpEndpoint, parse_host_port
from coordinator.server.loop import CoordinatorServer
from coordinator.server.metrics import CoordinatorMetrics
from coordinator.store.state_store import StateStore


def _stop_within(endpoint: HttpEndpoint, seconds: float) -> bool:
    stopper = threading.Thread(target=endpoint.stop, name="test-http-stop", daemon=True)
    stopper.start()
    stopper.join(seconds)
    return not stopper.is_alive()


def test_stop_without_start_returns_and_frees_the_port(tmp_path):
    server = CoordinatorServer(StateStore(tmp_path / "state"), "tcp://127.0.0.1:0")
    endpoint = HttpEndpoint("127.0.0.1:0", server, CoordinatorMetrics())
    assert _stop_within(endpoint, 5.0), "stop() of a never-started endpoint hung"
    host, port = parse_host_port(endpoint.address)
    with socket.socket() as s:
        s.bind((host, port))  # the listening socket was closed


def test_stop_after_start_ends_the_thread(tmp_path):
    server = CoordinatorServer(StateStore(tmp_path / "state"), "tcp://127.0.0.1:0")
    endpoint = HttpEndpoint("127.0.0.1:0", server, CoordinatorMetrics())
    endpoint.start()
    name = f"coordinator-http-{parse_host_port(endpoint.address)[1]}"
    assert any(t.name == name for t in threading.enumerate())
    assert _stop_within(endpoint, 5.0)
    assert not any(t.name == name for t in threading.enumerate())
