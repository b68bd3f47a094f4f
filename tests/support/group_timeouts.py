"""Consumer-group timeouts for tests (a first join takes about session_timeout_ms / 2).

A module of its own, not conftest: tests/spark has a conftest too, and
``from conftest import ...`` would resolve to whichever was imported first.
"""

TEST_SESSION_TIMEOUT_MS = 6000
TEST_HEARTBEAT_INTERVAL_MS = 1000
