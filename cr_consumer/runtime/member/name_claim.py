"""Member names are unique in a region: the member side of a refused join.

The region controller refuses a ``region_join`` for a member name held by
another incarnation it heard within ``member_timeout_s`` (reply ``refused``,
``holder: {incarnation, pid, host, silent_s}``; docs/region.md, "Member
names"). :class:`NameClaim` decides what the joining process does:

1. the holder ran on this host and its pid is gone (a member killed and
   restarted by ``crkafka run``): join again at once with ``replace``;
2. otherwise retry (the holder may be a killed process on another host whose
   silence the controller has not timed out yet);
3. refused for longer than ``member_timeout_s`` + ``DUPLICATE_GRACE_S``: a
   live duplicate; give up with an error naming the name, pid and host.
"""

from __future__ import annotations

import enum
import os
import socket

from coordinator.protocol.region.replies import NameHolder

#: Refusals are retried this long past the region's member_timeout_s before the
#: member gives up (the controller needs that long to call a killed holder dead).
DUPLICATE_GRACE_S = 1.0


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (EPERM: it does, as another user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ClaimStep(enum.Enum):
    """What a refused joiner does next (the module docstring's steps)."""

    REPLACE = "replace"  # step 1: join again at once, replacing the gone holder
    RETRY = "retry"  # step 2
    GIVE_UP = "give_up"  # step 3: a live duplicate (``NameClaim.duplicate`` says which)


class NameClaim:
    """State of one member process's claim on its name (the control I/O thread only)."""

    def __init__(self, region: str, member: str, member_timeout_s: float) -> None:
        self.region = region
        self.member = member
        self.limit_s = member_timeout_s + DUPLICATE_GRACE_S
        self.replace = False  # sent with the join: the holder's process is gone
        self.refused_since: float | None = None

    def on_refused(self, holder: NameHolder, now: float) -> ClaimStep:
        """The next step after a refusal naming ``holder``."""
        if self.refused_since is None:
            self.refused_since = now
        pid = holder.pid
        if not self.replace and holder.host == socket.gethostname() and pid is not None and not pid_alive(pid):
            self.replace = True
            return ClaimStep.REPLACE
        if now - self.refused_since < self.limit_s:
            return ClaimStep.RETRY
        return ClaimStep.GIVE_UP

    def duplicate(self, holder: NameHolder) -> str:
        """The error of step 3: the live duplicate ``holder``."""
        return (
            f"region {self.region!r} refused member {self.member!r}: member name {self.member!r} is already "
            f"used by a live member in this group (pid {holder.pid} on host {holder.host}, incarnation "
            f"{holder.incarnation}); operator names must be unique in the group: start this member "
            f"with another --name, or stop the other one"
        )
