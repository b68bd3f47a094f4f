"""Fixtures of the coordinator server's tests."""

from __future__ import annotations

import pytest

from coordinator.launcher import CoordinatorProcess


@pytest.fixture
def coordinator_http(tmp_path):
    """A real coordinator process with its HTTP endpoint on a free port (``.http_address``)."""
    proc = CoordinatorProcess(tmp_path / "state", http="auto")
    proc.start()
    yield proc
    proc.terminate()
