"""Exit codes of the consumer side's processes: ``crkafka member`` (a member
process), ``crkafka run`` (the runner) and the other ``crkafka`` commands.

The runner's supervisor reads a member's code to decide what happens next
(``cr_consumer/runtime/runner/supervisor.py``): a member that exits with
:attr:`ExitCode.ERROR` (or is killed) is restarted; :attr:`ExitCode.CONFIG`
and :attr:`ExitCode.REGION_FAILED` are final, the runner stops restarting it
and exits with the same code.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    #: Stopped on request (SIGTERM/SIGINT, ``--duration``), or every drill passed.
    OK = 0
    #: A failure a restart may cure (the source or the control channel failed, a
    #: drill failed, the broker exited).
    ERROR = 1
    #: Bad settings (a flag, a setting the region refuses, a member name taken):
    #: the same start would fail the same way.
    CONFIG = 2
    #: The region FAILED (too many consecutive resets): terminal for the region.
    REGION_FAILED = 3


#: Codes after which a member is not restarted.
FINAL = frozenset({ExitCode.CONFIG, ExitCode.REGION_FAILED})
