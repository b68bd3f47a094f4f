"""Supervising a region: the runner that starts the coordinator and N member
processes and drives it until its output is complete (``region_runner``: the
:class:`~handle.RegionHandle` the drills and ``crkafka run`` use; ``drive``,
running it until its output is complete; ``region_status``, the
coordinator's view of the region and waiting on it), how a member is started
(``launch``), the supervisor that restarts them with a backoff, waking as soon
as one ends (``supervisor``, ``exit_watch``, ``member_proc``, with a member's
last error), the warm standby that a restarted member is handed to
(``standby``, ``standby_proc``, ``handoff``).
"""
