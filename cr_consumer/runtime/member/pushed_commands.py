"""The commands the region controller pushes to a member, as the control channel takes them (``control.py``, step 4).

A pushed ``region_command`` is decoded and validated here
(``coordinator/protocol/region/commands.py``), before anything acts on it: an invalid one,
or one addressed to another region, is logged and dropped (the controller's phase timeout
covers it, as for a push lost on the way). A reset with ``rejoin`` first calls the rejoin
hint (the source's consumer rejoins its group), at once on the I/O thread: the command
itself may wait behind others on the member's control thread. Then the typed command goes
to ``on_command`` (the member's control thread queue), in arrival order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from coordinator.protocol.region.commands import RegionCommand, Reset, ResetToInitial, decode_command
from coordinator.protocol.wire.errors import Invalid

log = logging.getLogger(__name__)


class PushedCommands:
    """The control I/O thread's intake of pushed commands for one member (see the module docstring)."""

    def __init__(
        self,
        region: str,
        member: str,
        on_command: Callable[[RegionCommand], None],
        on_rejoin_hint: Callable[[], object] | None,
    ) -> None:
        self.region = region
        self.member = member
        self._on_command = on_command
        self._on_rejoin_hint = on_rejoin_hint

    def receive(self, body: Mapping[str, object]) -> None:
        """One pushed ``region_command`` body."""
        try:
            addressed = decode_command(body)
        except Invalid as exc:
            log.error("%s: invalid region_command dropped: %s", self.member, exc)
            return
        if addressed.region != self.region:
            log.error(
                "%s: region_command for region %r dropped (this member is in %r)",
                self.member,
                addressed.region,
                self.region,
            )
            return
        command = addressed.command
        match command:
            case Reset(rejoin=True) | ResetToInitial(rejoin=True) if self._on_rejoin_hint is not None:
                try:  # at once, on this thread: the command itself may wait behind others
                    self._on_rejoin_hint()
                except Exception:  # a hint only; the next Kafka heartbeat does the same
                    log.warning("%s: acting on the rejoin hint failed", self.member, exc_info=True)
        self._on_command(command)
