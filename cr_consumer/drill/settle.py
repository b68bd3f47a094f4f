"""Before the drill stops the region: wait (bounded) until the group's committed
offsets in Kafka reach the end of the input.

Why: with incremental (cooperative) rebalancing a drain's Kafka commit waits
for a stable group generation (the coordinator's checkpoint is the source of
truth; docs/region.md, "Cooperative (incremental) rebalancing"). A partition
that moves between live members is revoked in one rebalance and assigned in
the next; when the input is published before that second rebalance ends, the
commit of the moving partition is still deferred. Stopping the region then
(every member leaving starts yet another rebalance) would leave Kafka's
committed offsets behind the last checkpoint, which is what an operator
restarted without its coordinator state, or a lag monitor, reads.

Protocol (:func:`wait_for_commits`, called once every expected record is published):

1. Take the end of the input per partition from the manifest (the highest
   produced offset + 1, poison included: the consumer's position passes it).
2. Every ``POLL_PERIOD_S``, read the group's committed offsets (one admin
   client for the whole wait). The region keeps running meanwhile: its periodic
   drains commit once the group is stable, or commit the deferred offsets
   after the first poll in a stable generation.
3. Return True as soon as every partition's committed offset is at its end;
   False when ``timeout_s`` passes (the drill then stops the region anyway and
   the verifier reports what is behind). A failed read is logged and retried
   until the deadline; it is never swallowed silently.
"""

from __future__ import annotations

import logging

from coordinator.protocol.common.group_offsets import group_committed_offsets
from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from cr_consumer.drill.manifest import Manifest

log = logging.getLogger(__name__)

#: How often the committed offsets are read while waiting.
POLL_PERIOD_S = 0.5


def behind(
    manifest: Manifest, committed: dict[tuple[str, int], int | None]
) -> dict[tuple[str, int], tuple[int | None, int]]:
    """Partitions whose committed offset is below the end of the input:
    ``{(topic, partition): (committed or None, end)}``."""
    out = {}
    for key, last in manifest.last_offsets().items():
        comm = committed.get(key)
        if comm is None or comm < last + 1:
            out[key] = (comm, last + 1)
    return out


def wait_for_commits(bootstrap: str, group: str, manifest: Manifest, timeout_s: float) -> bool:
    """Wait at most ``timeout_s`` until the group's committed offsets reach the
    end of the input (see the module docstring); True when they did."""
    from kafka import KafkaAdminClient

    lagging: dict[tuple[str, int], tuple[int | None, int]] = {}
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="cr-drill-settle")

    def caught_up() -> bool:
        nonlocal lagging
        try:
            found = group_committed_offsets(admin, group)
        except Exception as exc:  # noqa: BLE001 - a broker hiccup: retried until the deadline
            log.warning("drill: reading the committed offsets of %s failed (%r); retrying", group, exc)
            return False
        lagging = behind(manifest, {(tp.topic, tp.partition): off for tp, off in found.items()})
        return not lagging

    try:
        # POLL_PERIOD_S is the read's period, not a synchronisation
        return wait_until(caught_up, timeout_s, f"the committed offsets of {group}", interval=POLL_PERIOD_S)
    except WaitTimeout:
        log.warning(
            "drill: after %.0f s the committed offsets of %s are still behind the input's end: %s",
            timeout_s,
            group,
            lagging,
        )
        return False
    finally:
        admin.close()
