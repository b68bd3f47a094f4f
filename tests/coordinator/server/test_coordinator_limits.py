"""Validation, bounds and limits of the coordinator as pure units (no processes).

The same properties are checked against a real coordinator process in
tests/coordinator/protocol/wire/test_coordinator_hostile.py; here each rule is tested on its own.
"""

from __future__ import annotations

import json
import threading
import time
import tracemalloc

import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.messages import RegionAck, RegionHeartbeat, RegionJoin, check_region_config
from coordinator.protocol.wire import envelope, fields, protocol
from coordinator.protocol.wire.errors import Invalid
from coordinator.server.api import Request
from coordinator.server.group_commit import GroupCommit
from coordinator.server.limits import MAX_LIMIT, Limits
from coordinator.store.control_table import ControlTable, iter_snapshot


def _env(body: dict, msg_type: str = "ping", rid: object = "r") -> bytes:
    return json.dumps({"v": 1, "id": rid, "type": msg_type, "body": body}).encode()


# ------------------------------------------------------------------ envelope


@pytest.mark.parametrize(
    "frame",
    [
        b'{"v":1,"id":"\\ud800","type":"ping","body":{}}',
        b'{"v":1,"id":"r","type":"ping","body":{"\\udfff":1}}',
        b'{"v":1,"id":"r","type":"ping","body":{"a":["x\\uDBFFy"]}}',
        b'{"v":1,"id":"\xed\xa0\x80","type":"ping","body":{}}',
        b'{"v":1,"id":"r","type":"ping","body":{"a":' + b"[" * 9 + b"]" * 9 + b"}}",
        b"[" * 200_000 + b"]" * 200_000,
        b"{" * 200_000,
        b'{"v":1,"id":"' + b"x" * 129 + b'","type":"ping","body":{}}',
        b'{"v":1,"id":' + b"9" * 30 + b',"type":"ping","body":{}}',
        b'{"v":1,"id":"a\\nb","type":"ping","body":{}}',
        b'{"v":1,"id":"r","type":"' + b"t" * 65 + b'","body":{}}',
        b'{"v":1,"id":"r","type":"pi\\u0000ng","body":{}}',
    ],
)
def test_decode_rejects_hostile_envelopes_as_malformed(frame):
    with pytest.raises(envelope.BadEnvelope) as info:
        envelope.decode(frame)
    assert info.value.error.code.value == "MALFORMED"
    assert info.value.request_id is None or envelope.valid_id(info.value.request_id)


def test_decode_accepts_nesting_up_to_the_bound_and_valid_surrogate_pairs():
    nested = {"a": [[[[[[]]]]]]}  # envelope(1) body(2) a(3) ... 8 levels
    env = envelope.decode(_env(nested))
    assert env.body == nested
    env = envelope.decode(_env({"s": "\U0001f600 [[[[[[[[[[[[ {{{{{{{{{ \\"}, rid="\U0001f600"))
    assert env.id == "\U0001f600"
    assert envelope.decode(_env({"d": [[[[[[[[[[]]]]]]]]]]}), envelope.MAX_REPLY_DEPTH).body


def test_depth_measure_ignores_brackets_inside_strings():
    assert not envelope.json_depth_exceeds(b'{"a":"[[[[[[[[[[[[[[[[[[[[\\"[[[["}', 2)
    assert envelope.json_depth_exceeds(b'{"a":[[[]]]}', 3)
    assert not envelope.json_depth_exceeds(b'{"a":[[[]]]}', 4)
    # escaped backslashes before a closing quote, and strings of brackets side by side
    assert not envelope.json_depth_exceeds(b'{"a":"\\\\","b":"[[[[","c":"]]]]\\\\\\""}', 1)
    assert envelope.json_depth_exceeds(b'["\\\\",["[",["]",[[]]]]]', 4)
    assert not envelope.json_depth_exceeds(b'["\\\\",["[",["]",[[]]]]]', 5)
    assert envelope.json_depth_exceeds(b'{"a":{"b":[{"c":[]}]}}', 4)  # mixed kinds, one level per pass


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1}',
        "[1,2]",
        ' {"a":1}',
        '{"a":1} ',
        '{"a":1}x',
        '{"a":1}{}',
        '{"a":',
        "{",
        "[",
        '{"a" 1}',
        "\ufeff{}",
        '{"a":NaN}',
        '"s"',
        "7",
        "",
        '{"a":"\\ud800"}',
        "[" * 5 + "]" * 5,
    ],
)
def test_the_scanner_fast_path_parses_and_refuses_as_json_loads(text):
    from coordinator.protocol.wire.envelope import _parse

    try:
        want: object = json.loads(text)
    except ValueError as exc:
        refused = exc
    else:
        assert _parse(text) == want
        return
    with pytest.raises(type(refused)) as info:
        _parse(text)
    assert str(info.value) == str(refused)


def _depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


_TRICKY_TEXT = st.text(alphabet='[]{}"\\ a,:\u2028\xe9', max_size=6)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | _TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY_TEXT, inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(value=_JSON_VALUES, ascii_only=st.booleans())
def test_depth_measure_agrees_with_the_parsed_depth(value, ascii_only):
    """Strings full of brackets, quotes and backslashes never change the measure."""
    frame = json.dumps(value, ensure_ascii=ascii_only).encode()
    for max_depth in range(8):
        assert envelope.json_depth_exceeds(frame, max_depth) == (_depth(value) > max_depth)


def test_replies_are_always_encodable():
    """The last line of defence: a body JSON or UTF-8 cannot hold becomes INTERNAL."""

    class Store:
        def sync(self) -> None:
            pass

        def keepalive(self) -> None:
            pass

    commit = GroupCommit(Store(), None)
    req = Request(identity=b"id", id="r1", type="ping", received=0.0)
    commit.reply(req, {"bad": "\ud800"})
    commit.reply(req, {"nan": float("nan")})
    commit.reply_many([req, req], {"bad": "\udc00"})
    commit.reject(b"id", "\ud800", Invalid("x"))
    commit.push(b"id", "cmd", {"bad": "\ud800"})  # dropped
    frames = [json.loads(frame) for _, frame in commit._outbox]
    assert [f["body"]["code"] for f in frames] == ["INTERNAL"] * 5
    assert [f["id"] for f in frames] == ["r1", "r1", "r1", "r1", None]


# ------------------------------------------------------------------ fields


@pytest.mark.parametrize("name", ["a\nb", "a\rb", "a\x00", "\x7f", "a\x85b", "a\u2028b", "\u2029", "", "x" * 1025])
def test_names_with_control_characters_are_invalid(name):
    with pytest.raises(Invalid):
        protocol.Register.from_body({"group": name, "region_index": 0, "operator": "o"})
    with pytest.raises(Invalid):
        fields.decode_offsets([[name, 0, 0]])


@pytest.mark.parametrize(
    "entry",
    [
        ["t", 0, 1 << 63],
        ["t", 1 << 31, 0],
        ["t", -1, 0],
        ["t", 0, -1],
        ["t", 0, 1.0],
        ["t", True, 0],
        ["t", 0, 10**400],
    ],
)
def test_offsets_and_partitions_are_kafka_bounded(entry):
    with pytest.raises(Invalid):
        fields.decode_offsets([entry])


def test_kafka_bounds_are_accepted():
    top = fields.decode_offsets([["t", (1 << 31) - 1, (1 << 63) - 1]])
    assert top == {("t", (1 << 31) - 1): (1 << 63) - 1}


@pytest.mark.parametrize("timeout_ms", [0, 600_001, 10**15, 10**400, 1.5, True, None])
def test_merge_timeout_is_bounded(timeout_ms):
    body = {
        "group": "g",
        "seq": 1,
        "attempt": 0,
        "n_contributors": 1,
        "operator": "o",
        "offsets": [],
        "timeout_ms": timeout_ms,
    }
    with pytest.raises(Invalid):
        protocol.MergeCheckpoint.from_body(body)


def test_free_text_is_cut_and_escaped():
    ack = RegionAck.from_body(
        {
            "region": "r",
            "member": "m",
            "incarnation": "i",
            "command": "drain",
            "ok": False,
            "error": "line1\nFORGED\x1b[2J" + "x" * 5000,
        }
    )
    assert "\n" not in ack.error
    assert "\x1b" not in ack.error
    assert ack.error.startswith("line1\\x0aFORGED\\x1b[2J")
    assert len(ack.error) <= fields.MAX_TEXT_LEN + 20


@pytest.mark.parametrize(
    "config",
    [
        {"period_s": float("inf")},
        {"period_s": float("nan")},
        {"period_s": 10**400},
        {"period_s": True},
        {"period_s": [1]},
        {"period_s": 0},
        {"period_s": -1},
        {"drain_timeout_s": 86_400.5},
        {"min_members": 0},
        {"min_members": 1.0},
        {"max_consecutive_resets": 10**30},
        {"index": -1},
        {"index": 1 << 63},
        {"mode": "other"},
        {"mode": 1},
        {"nope": 1},
        [],
        "x",
    ],
)
def test_region_config_is_range_checked(config):
    with pytest.raises(Invalid):
        check_region_config(config)


def test_region_config_keeps_only_checked_values():
    clean = check_region_config({"name": "ignored", "period_s": 2, "min_members": 3, "mode": "operator_driven"})
    assert clean == {"period_s": 2.0, "min_members": 3, "mode": "operator_driven"}
    join = RegionJoin.from_body(
        {"region": "r", "member": "m", "incarnation": "i", "pid": 12, "config": {"period_s": 1}}
    )
    assert join.config == {"period_s": 1.0}


def test_heartbeat_generation_is_int32():
    RegionHeartbeat.from_body(
        {
            "region": "r",
            "member": "m",
            "incarnation": "i",
            "kafka": {"member_id": None, "generation": -1, "rebalancing": False},
        }
    )
    # out of range: the report is ignored (coordinator/protocol/region/kafka_report.py), the heartbeat still counts
    hb = RegionHeartbeat.from_body({"region": "r", "member": "m", "incarnation": "i", "kafka": {"generation": 1 << 31}})
    assert hb.kafka is None
    assert "generation" in (hb.kafka_invalid or "")


def test_limits_must_be_positive_and_bounded():
    for bad in (0, -1, float("inf"), float("nan"), True, MAX_LIMIT + 1):
        with pytest.raises(ValueError, match=rf"limit max_groups must be a number in \(0, {MAX_LIMIT}\], got "):
            Limits(max_groups=bad)
    assert Limits(member_lease_s=0.5).member_lease_s == 0.5
    assert Limits(max_groups=MAX_LIMIT).max_groups == MAX_LIMIT


# ------------------------------------------------------------------ control table memory


def test_sparse_partitions_cost_memory_per_entry():
    """25 topics at partition 1,048,575 (the 600-byte request) must not allocate 8 MiB each."""
    table = ControlTable()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(25):
            table.set_many("g", f"topic-{i}", [1_048_575], [0])
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    request_bytes = len(json.dumps([[f"topic-{i}", 1_048_575, 0] for i in range(25)]))
    assert grown < 100 * request_bytes, f"{grown} bytes for a {request_bytes}-byte request"
    assert table.get("g", "topic-3", 1_048_575) == 0
    assert table.group_count("g") == 25


def test_dense_and_sparse_topics_agree_with_a_dict_model():
    import random

    rng = random.Random(7)
    table, model = ControlTable(), {}
    snap = None
    for step in range(4000):
        group, topic = f"g{rng.randint(0, 2)}", f"t{rng.randint(0, 3)}"
        parts = rng.sample(range(rng.choice([8, 64, 500_000])), rng.randint(1, 6))
        offs = [None if rng.random() < 0.25 else rng.randint(0, 10**12) for _ in parts]
        if step == 2000:
            snap, at_snapshot = table.snapshot(), dict(model)
        table.set_many(group, topic, parts, offs)
        for p, o in zip(parts, offs, strict=True):
            if o is None:
                model.pop((group, topic, p), None)
            else:
                model[(group, topic, p)] = o
        if step % 97 == 0:  # the kept live counts equal a count of the model
            assert table.group_count(group) == sum(1 for g, _, _ in model if g == group)
    got = {(g, t, p): o for g in table.groups() for (t, p), o in table.group_items(g).items()}
    assert got == model
    assert len(table) == len(model)
    for g in ("g0", "g1", "g2", "none"):
        assert table.group_count(g) == sum(1 for key in model if key[0] == g)
    from_snapshot = {(g, t, p): o for g, t, ps, os_ in iter_snapshot(snap, 5) for p, o in zip(ps, os_, strict=True)}
    assert from_snapshot == at_snapshot  # copy-on-write kept the snapshot intact (sparse dicts too)
    table.release_snapshot()


def test_a_write_refused_part_way_leaves_exact_counts():
    """Log content the table cannot hold raises after the entries before it were set;
    the live counts are those of what the buffers hold (dense and sparse)."""
    table = ControlTable()
    table.set_many("g", "dense", [0, 1], [5, 6])
    with pytest.raises(ValueError, match="negative offset -1 of partition 3"):
        table.set_many("g", "dense", [2, 3, 4], [7, -1, 9])
    with pytest.raises(ValueError, match="offset -3 of partition 900000 is out of range"):
        table.set_many("g", "sparse", [10, 900_000], [1, -3])
    assert table.group_items("g") == {("dense", 0): 5, ("dense", 1): 6, ("dense", 2): 7, ("sparse", 10): 1}
    assert table.group_count("g") == len(table) == 4
    table.set_many("g", "dense", [0, 1, 2], [None, None, None])
    table.set_many("g", "sparse", [10], [None])
    assert table.group_count("g") == len(table) == 0
    assert table.groups() == []


# ------------------------------------------------------------------ the loop goes on


def test_a_raising_timer_call_or_tick_does_not_stop_the_server(tmp_path):
    from coordinator.server.api import Service
    from coordinator.server.loop import CoordinatorServer
    from coordinator.store.state_store import StateStore

    class Ticker(Service):
        def __init__(self) -> None:
            self.ticks = 0

        def on_tick(self, now: float) -> None:
            self.ticks += 1
            raise RuntimeError("tick bug")

    store = StateStore(tmp_path / "s")
    ctx = zmq.Context()
    server = CoordinatorServer(store, "inproc://loop-test", context=ctx)
    ticker = Ticker()
    server.add_service(ticker)
    server.start()
    try:
        ran = threading.Event()
        server.call_soon_threadsafe(lambda: 1 / 0)
        server.call_soon_threadsafe(lambda: server.schedule(0.0, lambda: [][1]))
        server.call_soon_threadsafe(lambda: server.schedule(0.05, ran.set))
        assert ran.wait(5)
        wait_until(lambda: ticker.ticks >= 2, 5, "the failed tick to be retried after its backoff")
        assert server.running
        assert server.failure is None
    finally:
        server.stop()
        store.close()
        ctx.term()


def test_a_region_whose_tick_raises_goes_failed_with_the_reason(tmp_path):
    from coordinator.protocol.region.replies import RegionPhase
    from coordinator.region.service import RegionControllerService
    from coordinator.server.loop import CoordinatorServer
    from coordinator.store.state_store import StateStore

    store = StateStore(tmp_path / "s")
    store.load()
    server = CoordinatorServer(store, "inproc://unused")
    service = RegionControllerService()
    server.add_service(service)
    req = Request(identity=b"m", id="1", type="region_join", received=time.monotonic())
    join = RegionJoin.from_body(
        {"region": "r", "member": "m", "incarnation": "i", "config": {"min_members": 2, "member_timeout_s": 60}}
    )
    service._on_join(req, join)
    other = RegionJoin.from_body(
        {"region": "r2", "member": "m", "incarnation": "i", "config": {"min_members": 2, "member_timeout_s": 60}}
    )
    service._on_join(req, other)
    core = service.regions["r"]

    def broken_tick(now: float) -> None:
        raise KeyError("bug in the tick")

    core.tick = broken_tick  # the region's own logic raises
    service.on_tick(time.monotonic())
    assert core.phase is RegionPhase.FAILED
    assert "KeyError" in core.failed_reason
    assert "bug in the tick" in core.failed_reason
    assert store.get_document("region", "r")["failed"] is True
    assert service.regions["r2"].phase is RegionPhase.WAITING  # the other region goes on
    store.close()


def test_regions_without_members_expire(tmp_path):
    from coordinator.region.service import RegionControllerService
    from coordinator.server.loop import CoordinatorServer
    from coordinator.store.state_store import StateStore

    store = StateStore(tmp_path / "s")
    store.load()
    server = CoordinatorServer(store, "inproc://unused", limits=Limits(region_expiry_s=10))
    service = RegionControllerService()
    server.add_service(service)
    now = time.monotonic()
    req = Request(identity=b"m", id="1", type="region_join", received=now)
    service._on_join(req, RegionJoin.from_body({"region": "r", "member": "m", "incarnation": "i", "config": {}}))
    service.regions["r"].leave("m", now)
    service.on_tick(now)
    assert "r" in service.regions
    service.on_tick(now + 11)
    assert "r" not in service.regions
    assert store.get_document("region", "r") is None
    store.close()


def test_every_region_config_setting_has_a_range_check():
    """A RegionConfig setting without a check would take any value a join sent:
    adding a setting means adding its check, which the join's check applies."""
    import attrs

    from coordinator.protocol.region.config import RegionConfig

    assert all(f.validator is not None for f in attrs.fields(RegionConfig))
    defaults = RegionConfig(name="r").to_dict()
    assert check_region_config(defaults) == {k: v for k, v in defaults.items() if k != "name"}
