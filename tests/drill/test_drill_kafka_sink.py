"""The drills with the Kafka sink (``--sink kafka``) and the drill's keyed state (``--state``: a
count per key on a Kafka changelog, before the sink): a crash at each step of the sink's and the
changelog's part of the region protocol, a member kept down past its timeout, a paused member,
the fenced zombie, a failing sink, a kill: every input record exactly once among the committed
output, read from the log's own markers, every record's count right, and no transaction left
open at the end. Same small scale as the file sink's drills (tests/drill/test_drill_faults.py).

The steps and the fault points that break them: the flush (``crash-after-drain``: before the
checkpoint's flush and changelog write; ``crash-before-ack``: after them, the transactions
prepared, before the answer; ``crash-after-ack``: answered, before the region's decision
reaches the member), between the completion and the commit
(``crash-before-publish``), after the commit (``crash-after-publish``), after a reset resolved
and fenced (``crash-after-reset``), a RESUME lost on the way (``drop-resume``: the commit waits
for the next completion). ``crash-mid-publish`` is not among them: a sink holds at most one
prepared transaction at a time, so there is no step between two commits."""

from __future__ import annotations

import pytest

from cr_consumer.drill.config import UNTIMELY_SCENARIOS, DrillConfig
from cr_consumer.drill.pipeline import SinkKind
from cr_consumer.drill.scenarios import run_drill

from support.drill import FENCED_ZOMBIE_SEED, SMALL, assert_exactly_once

pytestmark = pytest.mark.slow

PAUSE_S = 5.0
SCENARIOS = (
    "kill-member",
    "sink-failure",
    "kill-member-long",
    "pause-member",
    "crash-after-drain",
    "crash-before-ack",
    "crash-after-ack",
    "crash-before-publish",
    "crash-after-publish",
    "crash-after-reset",
    "drop-resume",
)
SEEDS = {name: 700 + i for i, name in enumerate(SCENARIOS)}
#: Also run with the member on librdkafka (``--kafka-client``), its source and its Kafka sinks: the
#: other producer's data path at the steps where its own behaviour matters (a kill, a fenced
#: zombie's sends, its prepared transaction ended by another process, a reset's fence).
LIBRDKAFKA_SCENARIOS = ("kill-member", "pause-member", "crash-before-ack", "crash-before-publish", "crash-after-reset")
CASES = [(name, None) for name in SCENARIOS] + [(name, "librdkafka") for name in LIBRDKAFKA_SCENARIOS]


@pytest.mark.parametrize(("scenario", "client"), CASES)
def test_kafka_sink_drill_exactly_once(scenario, client, bootstrap, tmp_path):
    cfg = DrillConfig(
        scenario=scenario,
        bootstrap=bootstrap,
        out=tmp_path,
        seed=SEEDS[scenario],
        pause_s=PAUSE_S,
        sink=SinkKind.KAFKA,
        state=True,
        kafka_client=client,
        **SMALL,
    )
    report = run_drill(cfg)
    assert report["sink"] == "kafka"
    assert report["wrong_states"] == 0
    assert_exactly_once(report)
    if scenario in UNTIMELY_SCENARIOS:  # a fault point or a timed fault: it must have happened
        assert report["fault_fired"] is True, report["faults"]
    else:
        assert report["faults"][0]["fault"] == scenario, report["faults"]


@pytest.mark.parametrize("client", [None, "librdkafka"])
def test_kafka_sink_fenced_zombie_exactly_once(client, bootstrap, tmp_path):
    cfg = DrillConfig(
        scenario="fault-point",
        bootstrap=bootstrap,
        out=tmp_path,
        seed=FENCED_ZOMBIE_SEED,
        pause_s=10.0,
        sink=SinkKind.KAFKA,
        state=True,
        kafka_client=client,
        **SMALL,
    )
    report = run_drill(cfg)
    assert report["wrong_states"] == 0
    [fault] = report["faults"]
    assert (fault["point"], fault["action"]) == ("receive-checkpoint", "pause"), fault
    assert report["fault_fired"] is True
    assert_exactly_once(report)
