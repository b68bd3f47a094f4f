"""The drill's region: the runner's :class:`~cr_consumer.runtime.runner.region_runner.Region`
(the same code as ``crkafka run``) with the drill's settings, used through the
:class:`~cr_consumer.runtime.runner.handle.RegionHandle` seam.

:func:`start_region` starts ``members`` ``crkafka member`` processes of one
pipeline against the drill's own coordinator endpoint. The runner's
supervisor restarts a member that dies (a kill -9 fault) under the same name,
on the runner's warm standby process unless ``standby`` is False;
a member's final exit (the region FAILED) sets ``failed``, which ends the
drill. Member logs go to ``<state_dir>/logs/<member>.log``. With
``fault_dir``, every member process gets ``$CRKAFKA_FAULT_DIR``
(``cr_consumer/runtime/fault_points.py``): the drill arms the
runtime's fault points there.
"""

from __future__ import annotations

from pathlib import Path

from cr_consumer.runtime.fault_points import ENV_FAULT_DIR
from cr_consumer.runtime.runner.handle import RegionHandle
from cr_consumer.runtime.runner.region_runner import Region

#: A member silent this long is dropped by the controller (heartbeats every 0.5 s):
#: shorter than the broker's session timeout so that a kill -9 is seen quickly,
#: long enough that a busy 2-core machine does not cause false alarms.
MEMBER_TIMEOUT_S = 3.0
#: The region's drain and reset timeouts (the runner's defaults): how long a
#: phase waits for a member that stays silent.
PHASE_TIMEOUT_S = 30.0
#: Consecutive resets before the region gives up (FAILED): a drill's faults
#: cause a few in a row, which must not fail the region.
MAX_RESETS = 10


def start_region(
    *,
    pipeline: str,
    members: int,
    coordinator: str,
    bootstrap: str,
    group: str,
    output_dir: Path,
    state_dir: Path,
    params: dict[str, str],
    period_s: float = 1.0,
    member_timeout_s: float = MEMBER_TIMEOUT_S,
    max_resets: int = MAX_RESETS,
    fault_dir: Path | None = None,
    phase_timeout_s: float = PHASE_TIMEOUT_S,
    kafka_client: str | None = None,
    standby: bool = True,
) -> RegionHandle:
    """A started region of ``members`` member processes (see the module docstring)."""
    env = {ENV_FAULT_DIR: str(fault_dir)} if fault_dir is not None else None
    return Region(
        pipeline,
        members=members,
        bootstrap=bootstrap,
        coordinator=coordinator,
        group=group,
        output_dir=output_dir,
        state_dir=state_dir,
        period_s=period_s,
        member_timeout_s=member_timeout_s,
        max_consecutive_resets=max_resets,
        drain_timeout_s=phase_timeout_s,
        reset_timeout_s=phase_timeout_s,
        params=dict(params),
        env=env,
        kafka_client=kafka_client,
        standby=standby,
    ).start()
