"""What a drill runs: the scenarios (the faults it can inject), what some of
them need of the region or the broker, and :class:`DrillConfig`, one drill's
settings, every field checked before anything starts (``scenarios.run_drill``
runs it)."""

from __future__ import annotations

import os
from pathlib import Path

import attrs

from cr_consumer.drill import faults as fault_mod
from cr_consumer.drill.pipeline import SinkKind
from cr_consumer.testing.broker import ENV_BOOTSTRAP

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

#: Share of poison records in an input that has them (``DrillConfig.poison_ratio``).
POISON_RATIO = 0.02

#: Faults the region was designed for.
BASIC_SCENARIOS = (
    "kill-member",
    "kill-coordinator",
    "add-member",
    "remove-member",
    "new-topic",
    "sink-failure",
    "poison",
    "reset-storm",
)
#: Untimely faults: a member kept down past its timeout, stopped processes, a
#: crash / pause / lost message at each step of the region protocol.
UNTIMELY_SCENARIOS = (
    "kill-member-long",
    "pause-member",
    "pause-coordinator",
    "pause-broker",
    *fault_mod.POINT_SCENARIOS,
    "drop-command",
    "fault-point",
)
SCENARIOS = BASIC_SCENARIOS + UNTIMELY_SCENARIOS
#: Scenarios whose pause must outlast the member timeout (the member is to be dropped).
PAST_MEMBER_TIMEOUT = ("pause-member",)
#: Drain and reset timeout of the region in the scenarios that lose a pushed
#: command (the phase fails by this timeout); others keep the runner's 30 s.
SHORT_PHASE_TIMEOUT_S = 5.0
SHORT_PHASE_SCENARIOS = ("drop-command",)
#: Scenarios that need the broker process the drill starts itself.
EMBEDDED_BROKER_ONLY = ("pause-broker",)
#: ``coordinator_standby``: the coordinators' lease (``--log-lease``): a standby takes over
#: after this long without a write of the leader. Short, so a takeover fits a small drill;
#: a busy 2-core machine still writes well within it (the leader writes every third of it).
STANDBY_LEASE_S = 2.0
#: Scenarios refused with ``coordinator_standby``: a paused broker stops the coordinators'
#: log, so the leader fail-stops and no standby can take over (nothing the region can ride out).
NOT_WITH_COORDINATOR_STANDBY = ("pause-broker",)


@attrs.frozen(kw_only=True)
class DrillConfig:
    scenario: str = attrs.field(validator=attrs.validators.in_(SCENARIOS))
    members: int = 3
    partitions: int = 8
    messages: int = 200_000
    bootstrap: str | None = None
    out: Path = attrs.field(default=Path("drill-out"), converter=Path)
    seed: int = 0
    #: Production rate in records/s; 0 produces as fast as possible.
    rate: float = 0.0
    #: Region checkpoint period.
    period_s: float = 2.0
    session_timeout_ms: int = 6000
    #: The members' consumers rebalance incrementally (the cooperative-sticky
    #: assignor, the region runtime's default); False: eager (range, roundrobin).
    cooperative: bool = True
    #: The members' Kafka client ("kafka-python" or "librdkafka"; None: the default).
    kafka_client: str | None = None
    #: The runner keeps a warm standby member process (``crkafka run``'s default); False: restarts are cold.
    standby: bool = True
    #: Bound on the whole drill after the region starts.
    timeout_s: float = 180.0
    #: Keep the drill directory's output files (the report and plot are always kept).
    keep_output: bool = True
    #: Inject the fault when this fraction of the input is processed; None: seeded random in 0.2-0.6.
    fault_at: float | None = None
    #: Length of the pause scenarios' SIGSTOP (and of a pause fault point).
    pause_s: float = fault_mod.PAUSE_S
    #: Where the pipeline writes its output.
    sink: SinkKind = attrs.field(default=SinkKind.FILE, converter=SinkKind)
    #: The pipeline dead-letters its poison records into a sink of the same kind as ``sink``
    #: (``pipeline.py``), and the verifier checks that output too (``verify.py``).
    dead_letter: bool = False
    #: Poison records in the input whatever the scenario (the poison scenario always has them).
    poison: bool = False
    #: The pipeline keeps the drill's keyed state (``state.py``) and the verifier checks it.
    state: bool = False
    #: The coordinator keeps its log on the drill's broker (``--state kafka``, lease
    #: STANDBY_LEASE_S) with one standby; the members and the drill's clients get both
    #: endpoints; kill-coordinator and pause-coordinator act on the leader and the standby
    #: takes over (``faults.py``, docs/drills.md).
    coordinator_standby: bool = False

    @property
    def poison_ratio(self) -> float:
        """Share of poison records in the input."""
        return POISON_RATIO if self.poison or self.scenario == "poison" else 0.0

    def __attrs_post_init__(self) -> None:
        if self.members < 1:
            raise ValueError(f"--members must be >= 1, got {self.members}")
        if self.scenario == "remove-member" and self.members < 2:
            raise ValueError("the remove-member scenario needs --members >= 2")
        if self.partitions < 1:
            raise ValueError(f"--partitions must be >= 1, got {self.partitions}")
        if self.messages < self.partitions:
            raise ValueError(f"--messages ({self.messages}) must be >= --partitions ({self.partitions})")
        if self.rate < 0:
            raise ValueError(f"--rate must be >= 0, got {self.rate}")
        if self.fault_at is not None and not 0 <= self.fault_at < 1:
            raise ValueError(f"fault_at must be in [0, 1), got {self.fault_at}")
        if self.period_s <= 0 or self.timeout_s <= 0:
            raise ValueError("--period and --timeout must be > 0")
        if not 0 < self.pause_s <= 3600:
            raise ValueError(f"--pause must be in (0, 3600] s, got {self.pause_s}")
        if self.scenario in PAST_MEMBER_TIMEOUT and self.pause_s <= MEMBER_TIMEOUT_S:
            raise ValueError(
                f"the {self.scenario} scenario pauses past the member timeout ({MEMBER_TIMEOUT_S:g} s): "
                f"--pause must be longer, got {self.pause_s:g}"
            )
        if self.state and self.scenario == "new-topic":
            raise ValueError(
                "--state keeps its state per partition of one input topic; the new-topic scenario reads two"
            )
        if self.coordinator_standby:
            self._check_coordinator_standby()
        self._check_broker()

    def _check_broker(self) -> None:
        external = self.bootstrap or os.environ.get(ENV_BOOTSTRAP)
        if self.scenario in EMBEDDED_BROKER_ONLY and external:
            raise ValueError(
                f"the {self.scenario} scenario SIGSTOPs the broker process, so it needs the embedded "
                f"broker the drill starts itself; it cannot pause an external cluster ({external}): "
                f"run it without --bootstrap and without ${ENV_BOOTSTRAP}"
            )

    def _check_coordinator_standby(self) -> None:
        if self.scenario in NOT_WITH_COORDINATOR_STANDBY:
            raise ValueError(
                f"--coordinator-standby keeps the coordinator's log on the broker, which the {self.scenario} "
                "scenario pauses: the leader would fail-stop and no standby could take over"
            )
        if self.scenario == "pause-coordinator" and self.pause_s <= STANDBY_LEASE_S:
            raise ValueError(
                f"with --coordinator-standby, pause-coordinator pauses the leader past the lease "
                f"({STANDBY_LEASE_S:g} s): --pause must be longer, got {self.pause_s:g}"
            )


__all__ = [
    "BASIC_SCENARIOS",
    "EMBEDDED_BROKER_ONLY",
    "NOT_WITH_COORDINATOR_STANDBY",
    "PAST_MEMBER_TIMEOUT",
    "POISON_RATIO",
    "SCENARIOS",
    "SHORT_PHASE_SCENARIOS",
    "SHORT_PHASE_TIMEOUT_S",
    "STANDBY_LEASE_S",
    "UNTIMELY_SCENARIOS",
    "DrillConfig",
    "SinkKind",
]
