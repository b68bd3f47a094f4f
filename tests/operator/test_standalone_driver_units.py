"""StandaloneDriver with injected callables: when it drains, that the permit is
blocked around the drain, and how drain failures and other errors end up."""

from __future__ import annotations

import threading
import time

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.operator.config import RegionMode
from cr_consumer.operator.region import DrainError, RegionPermit
from cr_consumer.operator.standalone_driver import StandaloneDriver
from cr_consumer.operator.states import ClientState

WAIT_S = 5.0
POLL_S = 0.005  # polling a condition another thread makes true


class Harness:
    def __init__(self, mode=RegionMode.PERIODIC, period=0.05, drain_error: BaseException | None = None) -> None:
        self.permit = RegionPermit()
        self.drains: list[bool] = []  # permit blocked during each drain?
        self.resumes = 0
        self.joining = False
        self.failures: list[BaseException] = []
        self.drain_error = drain_error
        self.driver = StandaloneDriver(
            "unit",
            mode=mode,
            commit_period_s=period,
            permit=self.permit,
            drain=self._drain,
            resume_polling=self._resume,
            state=lambda: ClientState.RECORDS_FETCHED,
            failed=lambda: bool(self.failures),
            joining=lambda: self.joining,
            on_failure=self.failures.append,
        )

    def _drain(self) -> None:
        self.drains.append(self.permit.blocked)
        if self.drain_error is not None:
            raise self.drain_error

    def _resume(self) -> None:
        self.resumes += 1

    def __enter__(self) -> Harness:
        self.driver.start()
        return self

    def __exit__(self, *exc) -> None:
        self.driver.stop(WAIT_S)


def test_periodic_drains_run_with_the_permit_blocked_then_resume_and_unblock():
    with Harness() as h:
        wait_until(lambda: len(h.drains) >= 2 and h.resumes >= 2, WAIT_S, "two periodic drains", interval=POLL_S)
    assert all(h.drains)
    assert not h.permit.blocked


def test_no_periodic_drain_while_the_group_join_is_in_progress():
    h = Harness(period=0.01)
    h.joining = True
    with h:
        time.sleep(0.2)  # twenty periods: that nothing happens can only be seen by waiting
        assert h.drains == []
        h.joining = False
        wait_until(lambda: h.drains, WAIT_S, "a drain once joined", interval=POLL_S)


def test_operator_driven_drains_only_when_asked():
    with Harness(mode=RegionMode.OPERATOR_DRIVEN) as h:
        h.driver.request_drain("trigger count reached")
        wait_until(lambda: h.resumes == 1, WAIT_S, "the requested drain", interval=POLL_S)
        assert h.drains == [True]


def test_a_failed_drain_is_retried_at_the_next_period_not_fatal():
    with Harness(drain_error=DrainError("rebalance in progress")) as h:
        wait_until(lambda: len(h.drains) >= 2, WAIT_S, "a second attempt", interval=POLL_S)
        assert h.failures == []
        assert h.resumes >= 2


def test_any_other_error_is_handed_to_the_operator_and_ends_the_thread():
    error = RuntimeError("bug")
    with Harness(drain_error=error) as h:
        wait_until(lambda: h.failures, WAIT_S, "on_failure", interval=POLL_S)
        assert h.failures == [error]
        assert not h.permit.blocked  # unblocked on the way out
        n = len(h.drains)
        time.sleep(0.2)  # several periods: the thread has ended, nothing more is drained
        assert len(h.drains) == n


@pytest.mark.parametrize("mode", list(RegionMode))
def test_stop_ends_the_thread(mode):
    h = Harness(mode=mode, period=60.0)
    h.driver.start()
    h.driver.stop(WAIT_S)
    assert not any(t.name == "cr-standalone-unit" and t.is_alive() for t in threading.enumerate())
