"""A test's own embedded broker, for tests that stop it (SIGSTOP: a broker that
is paused, not killed, and so stops answering while its connections stay open).
The shared broker of the other tests is never stopped."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cr_consumer.testing.broker import EmbeddedBroker


@contextmanager
def own_broker(log_dir: Path) -> Iterator[EmbeddedBroker]:
    """Start a broker logging under ``log_dir``; at the end it is continued
    (SIGCONT) before it is stopped, whatever the test left it in."""
    with EmbeddedBroker(log_path=log_dir / "tansu.log") as own:
        try:
            yield own
        finally:
            if own.pid is not None:
                os.kill(own.pid, signal.SIGCONT)
