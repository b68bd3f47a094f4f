"""The endpoint a coordinator advertises, and the epoch of a coordinator on the file log:
an in-process server over real ZeroMQ."""

from __future__ import annotations

import pytest

from coordinator.client import CoordinatorClient, EndpointRole
from coordinator.protocol.wire.status import Role
from coordinator.server.loop import CoordinatorServer
from coordinator.store.state_store import StateStore


def test_the_status_names_the_advertised_endpoint_as_the_leader_of_epoch_0_on_the_file_log(tmp_path):
    store = StateStore(tmp_path)
    server = CoordinatorServer(store, "tcp://127.0.0.1:*", advertise="tcp://coordinator.example:5570")
    endpoint = server.start()
    try:
        with CoordinatorClient(endpoint, timeout=10) as client:
            status = client.status()
            probe = client.probe(5)
        assert (status.endpoint, status.role, status.leader, status.epoch) == (
            "tcp://coordinator.example:5570",
            Role.LEADER,
            "tcp://coordinator.example:5570",
            0,
        )
        assert (probe.role, probe.epoch) == (EndpointRole.LEADER, 0)
    finally:
        server.stop()
        store.close()


@pytest.mark.parametrize("advertise", ["coordinator.example:5570", "udp://h:1", "tcp://a:1,tcp://b:2", ""])
def test_an_unusable_advertised_endpoint_is_refused_before_anything_binds(tmp_path, advertise):
    store = StateStore(tmp_path)
    with pytest.raises(ValueError, match="coordinator endpoint"):
        CoordinatorServer(store, "tcp://127.0.0.1:*", advertise=advertise)
    store.close()
