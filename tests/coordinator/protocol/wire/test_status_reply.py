"""The status replies (``status``, ``region_status``): what the server builds is
what the client decodes, through JSON; a body that does not validate (a missing
field, a wrong type, a count over its bound, another version) is Invalid naming
what is wrong."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import (
    MAX_EVENT_DEPTH,
    MAX_EVENT_FIELDS,
    MAX_STATUS_EVENTS,
    MAX_STATUS_REGIONS,
    CheckpointMark,
    EventRecord,
    MemberStatus,
    RegionReport,
    RegionsReport,
    RegionStatus,
    ResetMark,
    ResetStatus,
    ResolveStatus,
)
from coordinator.protocol.region.transactions import MAX_PREPARED
from coordinator.protocol.wire.errors import Invalid
from coordinator.protocol.wire.fields import MAX_TEXT_LEN
from coordinator.protocol.wire.status import (
    MAX_STATUS_LIMITS,
    STATUS_VERSION,
    CoordinatorStatus,
    GroupStatus,
    LoadReport,
    MergeStatus,
    PendingMerge,
    RegistryStatus,
    Role,
    StoreStats,
)

REGION = RegionStatus(
    name="orders",
    index=3,
    phase=RegionPhase.BACKOFF,
    mode="operator_driven",
    period_s=2.5,
    members={
        "m0": MemberStatus(41, "inc-0", 0.25, KafkaReport("k-0", 7, True, True, True), None, 3),
        "m1": MemberStatus(None, "inc-1", 0.0, None, "kafka.generation must be an int32 or null", None),
    },
    last_consistent=12,
    seq=13,
    waiting_for=("m1",),
    reset=ResetStatus(
        attempt=4,
        consecutive_resets=2,
        max_consecutive_resets=5,
        resets=6,
        backoff_s=1.0,
        backoff_left_s=0.4,
        failure_streak=3,
    ),
    checkpoints=12,
    failed_cycles=1,
    failed_reason=None,
    transactions={"m0": ResolveStatus(12, 1, 2), "gone": ResolveStatus(9, 0, 2)},
    recent_checkpoints=(CheckpointMark(1700000002.5, 12), CheckpointMark(1700000001.0, 11)),
    recent_resets=(ResetMark(1700000000.0, "m1 stopped heartbeating"),),
)

EVENTS = (
    EventRecord(1700000000.0, "reset", {"attempt": 4, "cause": "failure", "why": "late", "seq": 11}),
    EventRecord(1700000001.0, "resume", {"attempt": 4, "reset_ms": 12.5, "next_drain_in_s": 0.25}),
    EventRecord(
        1700000002.0,
        "continuity",
        {"seq": None, "violations": 1, "partitions": [{"topic": "t", "partition": 0, "claims": [["t", 0, 1, 5]]}]},
    ),
)

SNAPSHOT = CoordinatorStatus(
    endpoint="tcp://127.0.0.1:5570",
    loaded=True,
    uptime_s=12.345,
    store=StoreStats(
        control_variables=10,
        groups=2,
        documents=1,
        log_bytes=4096,
        log_records=30,
        live_entries=12,
        dead_entries=3,
        compactions=1,
        compaction_running=False,
        compaction_failures=0,
        expire_failures=0,
        largest_compaction_record_bytes=512,
        compaction_max_pause_ms=1.5,
        fsyncs=9,
        load_seconds=0.01,
        truncated_bytes=0,
    ),
    load=LoadReport(records=30, entries=15, bytes=4096, seconds=0.01, truncated_bytes=7),
    limits={"max_groups": 100_000, "member_lease_s": 3600.0},
    registry=RegistryStatus(
        {"orders": GroupStatus(3, ("op-a", "op-b"), 2, True, 10)}, 1, {"max_groups": 2, "max_regions": 1}
    ),
    merge=MergeStatus((PendingMerge("orders", 7, 0, 2, ("op-a",), ("op-a",), 0.5),), 800, 4, 1),
    regions={"orders": REGION},
    role=Role.LEADER,
    leader="tcp://127.0.0.1:5570",
    epoch=7,
)


def _through_json(body: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(body))


def test_the_whole_snapshot_decodes_to_what_was_built():
    body = SNAPSHOT.to_body()
    assert body["version"] == STATUS_VERSION
    assert CoordinatorStatus.from_body(_through_json(body)) == SNAPSHOT


def test_a_snapshot_before_the_load_decodes_without_the_services_parts():
    loading = CoordinatorStatus(None, False, 0.1, None, None, {"max_groups": 5})
    decoded = CoordinatorStatus.from_body(_through_json(loading.to_body()))
    assert decoded == loading
    assert (decoded.registry, decoded.merge, decoded.regions) == (None, None, None)


def test_the_region_replies_decode_to_what_was_built():
    report = RegionReport(REGION, EVENTS)
    assert RegionReport.from_body(_through_json(report.to_body())) == report
    regions = RegionsReport({"orders": REGION, "empty": RegionStatus.from_body(_minimal_region("empty"))})
    assert RegionsReport.from_body(_through_json(regions.to_body())) == regions


def _minimal_region(name: str) -> dict[str, Any]:
    body = copy.deepcopy(REGION.to_body())
    body.update(name=name, members={}, waiting_for=[], transactions={}, recent_checkpoints=[], recent_resets=[])
    return body


@pytest.mark.parametrize("version", [None, 0, 1, 3, "2", True, 2.0001])
def test_another_status_version_is_refused(version):
    body = SNAPSHOT.to_body()
    if version is None:
        del body["version"]
    else:
        body["version"] = version
    with pytest.raises(Invalid, match="version"):
        CoordinatorStatus.from_body(body)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("role", "boss"),
        ("leader", "http://evil.example/"),
        ("leader", "tcp://a:1,tcp://b:2"),
        ("leader", "tcp://" + "h" * 400 + ":1"),
        ("leader", 5),
        ("epoch", -1),
        ("epoch", 1 << 31),
        ("epoch", True),
    ],
)
def test_a_bad_role_leader_or_epoch_is_invalid_naming_it(field, value):
    body = SNAPSHOT.to_body()
    body[field] = value
    with pytest.raises(Invalid, match=field):
        CoordinatorStatus.from_body(body)


@pytest.mark.parametrize("field", sorted(REGION.to_body()))
def test_a_region_without_a_required_field_is_invalid_naming_it(field):
    body = REGION.to_body()
    del body[field]
    nullable = {"last_consistent", "seq", "failed_reason"}
    if field in nullable:
        assert RegionStatus.from_body(body) == RegionStatus.from_body({**REGION.to_body(), field: None})
        return
    with pytest.raises(Invalid, match=field):
        RegionStatus.from_body(body)


@pytest.mark.parametrize("field", sorted(SNAPSHOT.to_body()["store"]))
def test_store_stats_without_a_field_are_invalid_naming_it(field):
    body = SNAPSHOT.to_body()
    del body["store"][field]
    with pytest.raises(Invalid, match=rf"store: .*{field}"):
        CoordinatorStatus.from_body(body)


def _region_with(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    body = REGION.to_body()
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        (("phase",), "SLEEPING", "phase"),
        (("mode",), "sometimes", "mode"),
        (("index",), -1, "index"),
        (("period_s",), float("nan"), "period_s"),
        (("period_s",), True, "period_s"),
        (("members",), [], "members"),
        (("members", "m0", "pid"), -1, r"members\['m0'\]: .*pid"),
        (("members", "m0", "silent_s"), -0.5, "silent_s"),
        (("members", "m0", "incarnation"), "", "incarnation"),
        (("members", "m0", "kafka"), {"generation": "7"}, r"members\['m0'\]: field 'kafka'"),
        (("members", "m0", "kafka_invalid"), 5, "kafka_invalid"),
        (("members", "m0"), "row", r"members\['m0'\] must be an object"),
        (("waiting_for",), "m1", "waiting_for"),
        (("waiting_for", 0), "m\n1", r"waiting_for\[0\]"),
        (("reset",), None, "reset"),
        (("reset", "resets"), -1, r"reset: .*resets"),
        (("reset", "backoff_left_s"), "soon", "backoff_left_s"),
        (("checkpoints",), 1.5, "checkpoints"),
        (("failed_reason",), ["x"], "failed_reason"),
        (("transactions", "m0", "prepared"), MAX_PREPARED + 1, "prepared"),
        (("transactions", "m0"), None, r"transactions\['m0'\]"),
        (("recent_checkpoints",), {}, "recent_checkpoints"),
        (("recent_checkpoints", 0, "seq"), "12", r"recent_checkpoints\[0\]: .*seq"),
        (("recent_resets", 0), 3, r"recent_resets\[0\]"),
    ],
)
def test_a_region_field_of_the_wrong_type_is_invalid_naming_it(path, value, named):
    with pytest.raises(Invalid, match=named):
        RegionStatus.from_body(_region_with(path, value))


def test_a_member_name_must_be_a_name():
    body = REGION.to_body()
    body["members"]["bad\x00name"] = body["members"].pop("m0")
    with pytest.raises(Invalid, match="a key of 'members'"):
        RegionStatus.from_body(body)


def test_regions_are_keyed_by_their_own_name():
    body = RegionsReport({"orders": REGION}).to_body()
    body["regions"]["payments"] = body["regions"].pop("orders")
    with pytest.raises(Invalid, match="payments"):
        RegionsReport.from_body(body)


def test_counts_over_their_bound_are_refused_before_the_entries_are_read():
    body = SNAPSHOT.to_body()
    body["regions"] = dict.fromkeys((f"r{i}" for i in range(MAX_STATUS_REGIONS + 1)), None)
    with pytest.raises(Invalid, match=f"more than {MAX_STATUS_REGIONS}"):
        CoordinatorStatus.from_body(body)
    body = SNAPSHOT.to_body()
    body["limits"] = {f"l{i}": 1 for i in range(MAX_STATUS_LIMITS + 1)}
    with pytest.raises(Invalid, match="limits"):
        CoordinatorStatus.from_body(body)
    report = RegionReport(REGION, ()).to_body()
    report["events"] = [None] * (MAX_STATUS_EVENTS + 1)
    with pytest.raises(Invalid, match=f"more than {MAX_STATUS_EVENTS}"):
        RegionReport.from_body(report)


@pytest.mark.parametrize(
    ("event", "named"),
    [
        ({"kind": "reset"}, "'t'"),
        ({"t": 1.0}, "kind"),
        ({"t": 1.0, "kind": "x", **{f"f{i}": i for i in range(MAX_EVENT_FIELDS + 1)}}, "more than"),
        ({"t": 1.0, "kind": "x", "deep": [[[[[[[1]]]]]]]}, f"more than {MAX_EVENT_DEPTH} deep"),
        ({"t": 1.0, "kind": "x", "n": float("inf")}, "finite"),
        ({"t": 1.0, "kind": "x", "bad\nkey": 1}, "field name"),
    ],
)
def test_a_bad_event_is_invalid_naming_what_is_wrong(event, named):
    with pytest.raises(Invalid, match=named):
        RegionReport.from_body({"region": REGION.to_body(), "events": [event]})


def test_an_events_text_is_cut_and_escaped_like_any_free_text():
    event = {"t": 1.0, "kind": "reset", "why": "x" * (MAX_TEXT_LEN + 10), "member": "m\n0"}
    (decoded,) = RegionReport.from_body({"region": REGION.to_body(), "events": [event]}).events
    assert decoded.fields == {"why": "x" * MAX_TEXT_LEN, "member": "m\\x0a0"}


@pytest.mark.parametrize(
    ("part", "change", "named"),
    [
        ("registry", {"groups": {"g": {"region_index": 0, "members": "a"}}}, r"registry: groups\['g'\]: .*members"),
        ("registry", {"n_groups": -1}, "registry: .*n_groups"),
        ("registry", {"limit_rejections": {"max_groups": 1.5}}, "registry: .*limit_rejections"),
        ("merge", {"pending": [{"group": "g"}]}, r"merge: pending\[0\]"),
        ("merge", {"pending_bytes": "lots"}, "merge: .*pending_bytes"),
        ("load", {"truncated_bytes": None}, "load: .*truncated_bytes"),
        ("store", {"compaction_running": 0}, "store: .*compaction_running"),
    ],
)
def test_a_bad_service_part_is_invalid_naming_the_part(part, change, named):
    body = SNAPSHOT.to_body()
    body[part].update(change)
    with pytest.raises(Invalid, match=named):
        CoordinatorStatus.from_body(body)
