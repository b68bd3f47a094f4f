"""The drill report: timeline analysis and the JSON document.

From the timeline events (``timeline.py``) and the verifier's result:

* ``resets``: reset rounds, including the region's first reset to the
  initial state at start-up: the controller's RESET events when the drill
  watched the controller (``watch_loop.py``), else distinct attempt
  numbers seen by the members' probes;
* ``checkpoints``: checkpoints the region declared consistent (same sources);
* ``time_to_detect_s``: from the (first) fault to the first reset after it
  (the controller's decision to reset; else a member's probe being reset);
* ``time_to_first_resume_s``: from the fault to the first RESUME after the
  first reset that followed it (the region runs again, maybe without the
  faulty member);
* ``time_to_resume_s``: from the fault to the controller's RESUME after the
  *last* reset that followed it (else the first record a member processed
  after that reset): a kill -9 of a member is typically followed by several
  resets (the controller notices the silent member, the survivors' Kafka
  rebalance, the restarted member's join);
* ``time_to_recover_s``: from the fault to the first checkpoint completed after
  that last reset (the region is consistent again);
* ``throughput_before`` / ``throughput_after`` (records/s, all members):
  records processed from the first batch to the fault, divided by that time;
  and from the resume to the last batch.

With a standby coordinator (``DrillConfig.coordinator_standby``), ``takeover``: what a
coordinator fault's takeover showed (``coordinator_standby.TakeoverRecord``: the old and new leader, the
epochs before and after, the time to the standby serving, the paused leader's exit code,
the checkpoints on the new leader), with ``resume_after_takeover_s`` (:func:`resume_after`):
from the fault to the controller's first RESUME once the new leader served. Else null.

Only events up to the moment the drill starts stopping the region count.
Times are wall-clock seconds (``time.time()``) of the events; all processes
run on the same host.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TypedDict

from cr_consumer.drill.coordinator_standby import TakeoverRecord
from cr_consumer.drill.faults import FaultRecord
from cr_consumer.drill.timeline import Event
from cr_consumer.drill.verify import VerifyResult

REPORT_VERSION = 4


class Timings(TypedDict):
    """The times (seconds from the fault) and throughputs of the module doc, and their source."""

    time_to_detect_s: float | None
    time_to_first_resume_s: float | None
    time_to_resume_s: float | None
    time_to_recover_s: float | None
    throughput_before: float | None
    throughput_after: float | None
    times_from: str


class Analysis(Timings):
    """What `analyse` reads from a drill's timeline."""

    resets: int
    checkpoints: int
    processed: int
    members_seen: list[str]


class DrillReport(Timings):
    """A drill's report, as ``report.json`` holds it (`build_report`)."""

    version: int
    scenario: str
    sink: str
    seed: int
    members: int
    partitions: int
    messages: int
    ok: bool
    produced: int
    poison: int
    expected: int
    delivered: int
    missing: int
    duplicates: int
    wrong_values: int
    unexpected: int
    committed_behind: int
    committed_basis: str | None
    aborted: int
    open_transactions: int
    #: With a dead-letter sink (else None and zeros): ``verify.py``'s checks 6-7.
    dead_letters: int | None
    dead_letter_missing: int
    dead_letter_duplicates: int
    dead_letter_unexpected: int
    #: With the drill's keyed state (else None): ``verify.py``'s check 8.
    wrong_states: int | None
    resets: int
    checkpoints: int
    processed_including_replays: int
    faults: list[FaultRecord]
    fault_fired: bool | None
    #: A standby coordinator's takeover (``coordinator_standby``), else None.
    takeover: TakeoverRecord | None
    elapsed_s: float
    out_dir: str
    plot: str | None
    error: str | None
    examples: dict[str, list[object]]


def _first(events: list[Event], pred: Callable[[Event], bool]) -> Event | None:
    return next((e for e in events if pred(e)), None)


def _controller_else_probes(events: list[Event], ctl: str, probe: str, key: Callable[[Event], object]) -> list[Event]:
    """The controller's ``ctl`` events (exact) when it was watched, else the first
    member probe ``probe`` event of each ``key``."""
    watched = [e for e in events if e["ev"] == ctl]
    if watched:
        return watched
    out, seen = [], set()
    for e in events:
        if e["ev"] == probe and key(e) not in seen:
            seen.add(key(e))
            out.append(e)
    return out


def reset_events(events: list[Event]) -> list[Event]:
    """One event per reset round (probes: per attempt)."""
    return _controller_else_probes(
        events,
        "ctl_reset",
        "reset",
        lambda e: e.get("attempt") if e.get("attempt") is not None else (e.get("seq"), e["member"]),
    )


def checkpoint_events(events: list[Event]) -> list[Event]:
    """One event per completed checkpoint (probes: per seq)."""
    return _controller_else_probes(events, "ctl_checkpoint", "complete", lambda e: e["seq"])


def last_completed_checkpoint(events: list[Event]) -> int | None:
    """The highest checkpoint id the region completed: the controller's events,
    and the members' probes (they also see a RESUME after the controller watch's
    last poll, and the completion a leaving member is told)."""
    seqs = [e["ctl"].get("seq") for e in events if e["ev"] == "ctl_checkpoint" and isinstance(e.get("ctl"), dict)]
    seqs += [e.get("seq") for e in events if e["ev"] == "complete"]
    seqs = [s for s in seqs if isinstance(s, int)]
    return max(seqs) if seqs else None


def resume_after(
    events: list[Event], served_at: float | None, fault_time: float, end_time: float | None = None
) -> float | None:
    """Seconds from ``fault_time`` to the first RESUME (the controller's, else a member's probe)
    at or after ``served_at`` (the new leader first seen serving); None when there is none
    before ``end_time``."""
    if served_at is None:
        return None
    later = sorted(
        (e for e in events if e["t"] >= served_at and (end_time is None or e["t"] <= end_time)), key=lambda e: e["t"]
    )
    watched = any(e["ev"].startswith("ctl_") for e in events)
    kinds = ("ctl_resume",) if watched else ("resume",)
    resume = _first(later, lambda e: e["ev"] in kinds)
    return round(resume["t"] - fault_time, 3) if resume else None


def analyse(events: list[Event], fault_time: float | None, end_time: float | None = None) -> Analysis:
    """``end_time``: when the drill started stopping the region; later events
    (resets caused by members leaving at shutdown) are not counted."""
    events = sorted(events, key=lambda e: e["t"])
    if end_time is not None:
        events = [e for e in events if e["t"] <= end_time]
    resets = reset_events(events)
    checkpoints = checkpoint_events(events)
    batches = [e for e in events if e["ev"] == "batch"]
    processed = sum(e["n"] for e in batches)
    watched = any(e["ev"].startswith("ctl_") for e in events)
    out: Analysis = {
        "resets": len(resets),
        "checkpoints": len(checkpoints),
        "processed": processed,
        "time_to_detect_s": None,
        "time_to_first_resume_s": None,
        "time_to_resume_s": None,
        "time_to_recover_s": None,
        "throughput_before": None,
        "throughput_after": None,
        "times_from": "controller" if watched else "member probes",
        "members_seen": sorted({e["member"] for e in events if e["ev"] == "start"}),
    }
    if fault_time is None:
        if len(batches) >= 2:
            span = batches[-1]["t"] - batches[0]["t"]
            out["throughput_before"] = round(processed / span, 1) if span > 0 else None
        return out
    after_resets = [e for e in resets if e["t"] >= fault_time]
    if after_resets:
        out["time_to_detect_s"] = round(after_resets[0]["t"] - fault_time, 3)
        resume_kinds = ("ctl_resume",) if watched else ("resume",)
        first_resume = _first([e for e in events if e["t"] >= after_resets[0]["t"]], lambda e: e["ev"] in resume_kinds)
        if first_resume:
            out["time_to_first_resume_s"] = round(first_resume["t"] - fault_time, 3)
        last = after_resets[-1]
        tail = [e for e in events if e["t"] >= last["t"]]
        resume = _first(tail, lambda e: e["ev"] in resume_kinds)
        if resume:
            out["time_to_resume_s"] = round(resume["t"] - fault_time, 3)
        complete = _first([c for c in checkpoints if c["t"] >= last["t"]], lambda e: True)
        if complete:
            out["time_to_recover_s"] = round(complete["t"] - fault_time, 3)
    before = [e for e in batches if e["t"] < fault_time]
    if len(before) >= 2:
        span = fault_time - before[0]["t"]
        out["throughput_before"] = round(sum(e["n"] for e in before[1:]) / span, 1) if span > 0 else None
    if out["time_to_resume_s"] is not None:
        t_resume = fault_time + out["time_to_resume_s"]
        later = [e for e in batches if e["t"] >= t_resume]
        if len(later) >= 2:
            span = later[-1]["t"] - t_resume
            out["throughput_after"] = round(sum(e["n"] for e in later) / span, 1) if span > 0 else None
    return out


def per_member_series(events: list[Event], bin_s: float = 0.5) -> dict[str, tuple[list[float], list[float]]]:
    """member -> (bin start times relative to t0, records/s) for the plot."""
    batches = [e for e in events if e["ev"] == "batch"]
    if not batches:
        return {}
    t0 = min(e["t"] for e in events)
    bins: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for e in batches:
        bins[e["member"]][int((e["t"] - t0) / bin_s)] += e["n"]
    last = int((max(e["t"] for e in events) - t0) / bin_s) + 1
    series = {}
    for member, counts in sorted(bins.items()):
        xs = [i * bin_s for i in range(last)]
        ys = [counts.get(i, 0) / bin_s for i in range(last)]
        series[member] = (xs, ys)
    return series


def build_report(
    *,
    scenario: str,
    sink: str,
    seed: int,
    members: int,
    partitions: int,
    messages: int,
    verify_result: VerifyResult,
    analysis: Analysis,
    faults: list[FaultRecord],
    elapsed_s: float,
    out_dir: str,
    plot: str | None,
    error: str | None = None,
    fault_fired: bool | None = None,
    takeover: TakeoverRecord | None = None,
) -> DrillReport:
    v = verify_result
    report: DrillReport = {
        "version": REPORT_VERSION,
        "scenario": scenario,
        "sink": sink,
        "seed": seed,
        "members": members,
        "partitions": partitions,
        "messages": messages,
        "ok": v.ok and error is None and fault_fired is not False,
        "produced": v.produced,
        "poison": v.poison,
        "expected": v.expected,
        "delivered": v.delivered,
        "missing": v.missing,
        "duplicates": v.duplicates,
        "wrong_values": v.wrong_values,
        "unexpected": v.unexpected,
        "committed_behind": v.committed_behind,
        "committed_basis": v.committed_basis,
        "aborted": v.aborted,
        "open_transactions": v.open_transactions,
        "dead_letters": v.dead_letters,
        "dead_letter_missing": v.dead_letter_missing,
        "dead_letter_duplicates": v.dead_letter_duplicates,
        "dead_letter_unexpected": v.dead_letter_unexpected,
        "wrong_states": v.wrong_states,
        "resets": analysis["resets"],
        "checkpoints": analysis["checkpoints"],
        "time_to_detect_s": analysis["time_to_detect_s"],
        "time_to_first_resume_s": analysis["time_to_first_resume_s"],
        "time_to_resume_s": analysis["time_to_resume_s"],
        "time_to_recover_s": analysis["time_to_recover_s"],
        "throughput_before": analysis["throughput_before"],
        "throughput_after": analysis["throughput_after"],
        "processed_including_replays": analysis["processed"],
        "times_from": analysis["times_from"],
        "faults": faults,
        "fault_fired": fault_fired,
        "takeover": takeover,
        "elapsed_s": round(elapsed_s, 2),
        "out_dir": out_dir,
        "plot": plot,
        "error": error,
        "examples": v.examples,
    }
    return report
