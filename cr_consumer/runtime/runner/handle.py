"""What a caller can do to a running region of member processes: the seam
between the runner (:class:`~cr_consumer.runtime.runner.region_runner.Region`,
which implements it) and its users (``crkafka run``, ``run_until_done``, the drills'
faults in ``cr_consumer/drill/faults.py``).

Member names are unique in the region and never reused. A handle method that
names a member without a live process raises
:class:`~cr_consumer.runtime.runner.supervisor.NotRunning` (a ``ValueError``).
"""

from __future__ import annotations

import signal
from typing import Protocol


class RegionHandle(Protocol):
    #: The region's name (its Kafka group).
    group: str

    @property
    def failed(self) -> str | None:
        """Why the region failed for good (a member's final exit), else None."""
        ...

    def live_members(self) -> list[str]:
        """Members not removed: running, or dead and about to be restarted."""
        ...

    def running_members(self) -> list[str]:
        """Members whose process is running now."""
        ...

    def pid(self, member: str) -> int:
        """The pid of ``member``'s running process."""
        ...

    def kill(self, member: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to ``member``'s process, without waiting for it to end
        (the supervisor restarts it under the same name); returns its pid."""
        ...

    def add_member(self) -> str:
        """Start one more member (a new name); returns its name."""
        ...

    def remove_member(self, member: str | None = None) -> str:
        """Stop ``member`` (the last live one when None) cleanly (SIGTERM: it
        leaves the region and the Kafka group), never to be restarted; returns
        its name once its process ended."""
        ...

    def stop(self) -> None:
        """Stop the supervisor and every member (SIGTERM, then SIGKILL after a bound)."""
        ...
