"""The leader's lease record on the log topic (key ``tail.LEASE_KEY``): who leads, and that it lives.

A JSON object ``{"pid", "host", "topic", "endpoint", "epoch"}``: the leader's process, its
advertised endpoint (null when it advertises none) and its epoch (the producer epoch of its
fence). The leader writes one (`coordinator.store.kafka.kafka_log.KafkaLog`):

1. at once after its fence and replay, before it serves: its first write, so a standby
   learns the new leader without waiting for the lease interval;
2. inside a group commit's transaction when none was written for ``lease_s / 3``, so a
   standby started while the leader is busy learns it too;
3. on its own (``keepalive``) when the log had no write for ``lease_s / 3``.

A standby reads them while it follows the log (`decode_lease`) and answers NOT_LEADER
naming the endpoint. A record it cannot use (too large, not JSON, a bad endpoint or epoch,
or a leader that advertises none) names no leader: it is skipped, and the lease it
renews counts as before.
"""

from __future__ import annotations

import json
import os
import socket

from coordinator.protocol.common.endpoints import check_endpoint
from coordinator.protocol.wire.envelope import MAX_EPOCH
from coordinator.protocol.wire.status import LeaderInfo

#: Largest lease record read: a real one is a few hundred bytes (the endpoint at most
#: ``MAX_ENDPOINT_LEN``); a larger one is not parsed.
MAX_LEASE_BYTES = 4096


def encode_lease(endpoint: str | None, epoch: int, topic: str) -> bytes:
    lease = {"pid": os.getpid(), "host": socket.gethostname(), "topic": topic, "endpoint": endpoint, "epoch": epoch}
    return json.dumps(lease, separators=(",", ":")).encode()


def decode_lease(value: bytes) -> LeaderInfo | None:
    """The leader a lease record names, checked; None when it names no usable one."""
    if len(value) > MAX_LEASE_BYTES:
        return None
    try:
        lease = json.loads(value)
    except ValueError:
        return None
    if not isinstance(lease, dict):
        return None
    endpoint, epoch = lease.get("endpoint"), lease.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
        return None
    try:
        return LeaderInfo(check_endpoint(endpoint), epoch)
    except ValueError:
        return None


__all__ = ["MAX_LEASE_BYTES", "decode_lease", "encode_lease"]
