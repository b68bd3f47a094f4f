"""Group membership is logged per member: a registration writes O(1) bytes."""

from __future__ import annotations

import crc32c

from coordinator.store import records
from coordinator.store.log import segment
from coordinator.store.state_store import StateStore

MEMBERS = 1500


def _name(i: int) -> str:
    return f"operator-{i:04d}"


def test_a_registration_appends_constant_bytes_whatever_the_group_size(tmp_path):
    store = StateStore(tmp_path)
    store.load()
    per_register = []
    for i in range(MEMBERS):
        before = store.stats()["log_bytes"]
        store.register_member("big", 0, _name(i))
        per_register.append(store.stats()["log_bytes"] - before)
    store.sync()
    assert len(store.members("big")) == MEMBERS
    # the record carries the member's key and the group's activity, not the member list
    assert max(per_register[1:]) < 150, max(per_register[1:])
    assert store.stats()["log_bytes"] < 200 * MEMBERS
    before = store.stats()["log_bytes"]
    store.unregister_member("big", _name(7))
    assert store.stats()["log_bytes"] - before < 150
    store.close()
    again = StateStore(tmp_path)
    again.load()
    assert again.members("big") == sorted(_name(i) for i in range(MEMBERS) if i != 7)
    assert again.region_index("big") == 0
    again.close()


def _v1_record(entries: list[list]) -> bytes:
    body = bytes((1,)) + records.encode(1.0, entries)
    return segment.HEADER.pack(len(body), crc32c.crc32c(body)) + body


def test_a_version_1_log_replays_and_continues_with_member_records(tmp_path):
    """A log written by the previous coordinator (whole-group "g" values, version 1)
    loads unchanged; new registrations append member records after it; a
    compaction rewrites everything as per-member records."""
    old = [
        [records.GROUP, "g", {"region_index": 2, "members": ["a"]}],
        [records.GROUP, "g", {"region_index": 2, "members": ["a", "b", "c"]}],
        [records.GROUP, "gone", {"region_index": 0, "members": ["x"]}],
        [records.GROUP, "gone", None],
        records.control_entry("g", "t", [0, 1], [10, 11]),
    ]
    (tmp_path / segment.segment_name(0)).write_bytes(b"".join(_v1_record([e]) for e in old))
    store = StateStore(tmp_path, compact_min_bytes=0)
    store.load()
    assert store.members("g") == ["a", "b", "c"] and store.region_index("g") == 2
    assert store.region_index("gone") is None
    store.register_member("g", 2, "d")
    store.unregister_member("g", "a")
    store.close()
    store = StateStore(tmp_path)
    store.load()
    assert store.members("g") == ["b", "c", "d"]
    store.compact()
    store.close()
    (seg,) = tmp_path.glob("segment-*.log")
    kinds = []
    segment.scan(seg.read_bytes(), lambda _o, p: kinds.extend(e[0] for e in records.decode(p)[2]))
    assert records.GROUP not in kinds and kinds.count(records.MEMBER) == 3
    again = StateStore(tmp_path)
    again.load()
    assert again.members("g") == ["b", "c", "d"] and again.get_initial_offsets("g") == {("t", 0): 10, ("t", 1): 11}
    again.close()


def test_compaction_and_expiry_keep_membership_exact(tmp_path):
    class Clock:
        now = 1000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    store = StateStore(tmp_path, clock=clock, retention_s=10, compact_min_bytes=0)
    store.load()
    for i in range(50):
        store.register_member("g", 1, _name(i))
    for i in range(0, 50, 2):
        store.unregister_member("g", _name(i))
    store.register_member("empty", 0, "x")
    store.unregister_member("empty", "x")
    store.compact()
    assert store.stats()["dead_entries"] == 0
    clock.now += 20
    store.expire()
    assert store.region_index("empty") is None and store.region_index("g") == 1
    store.close()
    again = StateStore(tmp_path, clock=clock, retention_s=10)
    again.load()
    assert again.members("g") == [_name(i) for i in range(1, 50, 2)]
    assert again.groups() == ["g"]
    again.close()
