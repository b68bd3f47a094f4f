"""The region controller service keeps a timer at the next periodic drain (and at
the end of a backoff hold), so the coordinator's loop ticks on the drain's grid
slot rather than up to its 0.1 s tick later (coordinator/region/service.py,
timing.py). In-process server,
not started: the service's handlers and tick are called directly."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.messages import RegionJoin
from coordinator.protocol.region.replies import RegionPhase
from coordinator.region.machine import RegionCore
from coordinator.region.service import RegionControllerService
from coordinator.server.api import Request, Timer
from coordinator.server.loop import CoordinatorServer
from coordinator.store.state_store import StateStore


class RecordingServer(CoordinatorServer):
    """The real server; its timers are also kept in a list to look at."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.timers: list[tuple[float, Timer]] = []

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        timer = super().schedule(delay_s, callback)
        self.timers.append((delay_s, timer))
        return timer


def _one_member_region(
    tmp_path, config: dict
) -> tuple[StateStore, RecordingServer, RegionControllerService, RegionCore, float]:
    """A service on a recording server with region "r" and its member "m"
    joined at t0 (the join's reset round running)."""
    store = StateStore(tmp_path / "s")
    store.load()
    server = RecordingServer(store, "inproc://unused")
    service = RegionControllerService()
    server.add_service(service)
    t0 = time.monotonic()
    req = Request(identity=b"m", id="1", type="region_join", received=t0)
    service._on_join(req, RegionJoin.from_body({"region": "r", "member": "m", "incarnation": "i", "config": config}))
    return store, server, service, service.regions["r"], t0


def test_a_timer_wakes_the_loop_when_the_next_drain_is_due(tmp_path):
    store, server, service, core, t0 = _one_member_region(tmp_path, {"period_s": 1.0, "member_timeout_s": 60})
    assert core.phase is RegionPhase.RESETTING
    core.ack("m", CommandKind.RESET, None, core.resets.attempt, True, None, t0 + 0.1)
    assert core.phase is RegionPhase.RUNNING
    assert core.cycles.next_at is not None

    service.on_tick(t0 + 0.2)
    assert [delay for delay, _ in server.timers] == [core.cycles.next_at - (t0 + 0.2)]
    service.on_tick(t0 + 0.3)  # the same drain: no second timer
    assert len(server.timers) == 1

    due = core.cycles.next_at
    service.on_tick(due)  # the timer's wake-up: the drain starts on its slot
    assert core.phase is RegionPhase.DRAINING
    core.ack("m", CommandKind.DRAIN, core.cycles.seq, None, True, None, due + 0.01)
    core.ack("m", CommandKind.CHECKPOINT, core.cycles.seq, None, True, None, due + 0.6)
    service.on_tick(due + 0.61)
    assert core.cycles.next_at == due + 1.0  # a period after the slot, not after the RESUME
    assert len(server.timers) == 2
    assert server.timers[-1][0] == (due + 1.0) - (due + 0.61)

    core.tick(due + 1.0)
    assert core.phase is RegionPhase.DRAINING
    core.members.heartbeat("m", b"m", "i", due + 1.05, KafkaReport("k", 1, rebalancing=True))
    core.ack("m", CommandKind.DRAIN, core.cycles.seq, None, True, None, due + 1.1)
    core.ack("m", CommandKind.CHECKPOINT, core.cycles.seq, None, True, None, due + 1.2)
    service.on_tick(due + 2.5)  # due and deferred (the group rebalances): no timer for a drain already due
    assert core.phase is RegionPhase.RUNNING
    assert len(server.timers) == 2
    service.on_tick(due + 2.6)
    assert len(server.timers) == 2
    store.close()


def test_a_timer_wakes_the_loop_when_a_backoff_hold_ends(tmp_path):
    store, server, service, core, t0 = _one_member_region(tmp_path, {"mode": "operator_driven", "member_timeout_s": 60})
    core.ack("m", CommandKind.RESET, None, core.resets.attempt, True, None, t0 + 0.1)
    for at in (t0 + 0.2, t0 + 0.3):  # two failures in a row: the second holds its RESUME 0.5 s
        core.request_reset("m", False, "sink down", at)
        core.ack("m", CommandKind.RESET, None, core.resets.attempt, True, None, at + 0.01)
    due = core.wake_at
    assert core.phase is RegionPhase.BACKOFF
    assert due == pytest.approx(t0 + 0.8)
    service.on_tick(t0 + 0.4)
    assert [delay for delay, _ in server.timers] == [pytest.approx(due - (t0 + 0.4))]
    service.on_tick(due)  # the timer's wake-up: the RESUME leaves
    assert core.phase is RegionPhase.RUNNING
    assert len(server.timers) == 1
    store.close()
