"""The drills' small scale and the exactly-once verdict on a drill report."""

from __future__ import annotations

# Small scale: 2 members, 4 partitions, 4,000 records produced at 1,500/s after
# a 5 % warm-up, so the fault lands while records are flowing.
SMALL = dict(members=2, partitions=4, messages=4000, rate=1500.0, timeout_s=75.0, session_timeout_ms=6000)
#: The basic scenarios tests/drill/test_drill_cooperative.py runs, at a steady input
#: long enough for the rebalances to happen while records flow; the other basic
#: scenarios run at SMALL scale in tests/drill/test_drill_scenarios.py.
STEADY_INPUT_SCENARIOS = ("add-member", "kill-coordinator", "kill-member", "remove-member", "reset-storm")
#: A ``fault-point`` seed whose point pauses member-1 when it receives a checkpoint, for longer
#: than the Kafka session timeout (10 s > 6 s): the broker gives its partitions to the other
#: member, which processes them from the checkpoint; the paused process comes back still holding
#: them (a fenced zombie). Before the drain failed on a fenced consumer, its checkpoint answer
#: published 1,188-2,000 records a second time (found by the soak). The draw depends on the
#: list of fault points (``faults.RANDOM_POINTS``): a new point needs a new seed with the same
#: draw (point, action, victim, moment).
FENCED_ZOMBIE_SEED = 201688106


def assert_exactly_once(report: dict) -> None:
    summary = {
        k: report[k]
        for k in (
            "scenario",
            "produced",
            "poison",
            "delivered",
            "missing",
            "duplicates",
            "wrong_values",
            "unexpected",
            "committed_behind",
            "open_transactions",
            "wrong_states",
            "error",
            "examples",
        )
    }
    assert report["error"] is None, summary
    assert report["missing"] == 0, summary
    assert report["duplicates"] == 0, summary
    assert report["wrong_values"] == 0, summary
    assert report["unexpected"] == 0, summary
    assert report["committed_behind"] == 0, summary
    assert report["open_transactions"] == 0, summary
    assert not report["wrong_states"], summary
    assert report["delivered"] == report["produced"] - report["poison"], summary
    assert report["ok"], summary
