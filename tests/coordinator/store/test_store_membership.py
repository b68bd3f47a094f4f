"""Group membership is logged per member: a registration writes O(1) bytes."""

from __future__ import annotations

import pytest

from coordinator.store import records
from coordinator.store.log import segment
from coordinator.store.state_store import StateStore

MEMBERS = 1500


def _name(i: int) -> str:
    return f"operator-{i:04d}"


def test_a_registration_appends_constant_bytes_whatever_the_group_size(tmp_path, store_log):
    store = StateStore(tmp_path, log=store_log())
    store.load()
    per_register = []
    for i in range(MEMBERS):
        before = store.stats().log_bytes
        store.register_member("big", 0, _name(i))
        per_register.append(store.stats().log_bytes - before)
    store.sync()
    assert len(store.members("big")) == MEMBERS
    # the record carries the member's key and the group's activity, not the member list
    assert max(per_register[1:]) < 150, max(per_register[1:])
    assert store.stats().log_bytes < 200 * MEMBERS
    before = store.stats().log_bytes
    store.unregister_member("big", _name(7))
    assert store.stats().log_bytes - before < 150
    store.close()
    again = StateStore(tmp_path, log=store_log())
    again.load()
    assert again.members("big") == sorted(_name(i) for i in range(MEMBERS) if i != 7)
    assert again.region_index("big") == 0
    again.close()


def test_a_whole_group_entry_is_an_unknown_kind(tmp_path):
    """The registry is written per member ("r", then "m" entries); a record holding a
    whole-group "g" value does not decode, and start-up stops naming it."""
    entry = ["g", "g", {"region_index": 2, "members": ["a"]}]
    with pytest.raises(ValueError, match="unknown entry kind 'g'"):
        records.decode(records.encode(1.0, [entry]))
    (tmp_path / segment.segment_name(0)).write_bytes(segment.encode_record(records.encode(1.0, [entry])))
    with pytest.raises(segment.CorruptLog, match="unknown entry kind"):
        StateStore(tmp_path).load()


def test_compaction_and_expiry_keep_membership_exact(tmp_path, store_log):
    class Clock:
        now = 1000.0

        def __call__(self) -> float:
            return self.now

    clock = Clock()
    store = StateStore(tmp_path, log=store_log(), clock=clock, retention_s=10, compact_min_bytes=0)
    store.load()
    for i in range(50):
        store.register_member("g", 1, _name(i))
    for i in range(0, 50, 2):
        store.unregister_member("g", _name(i))
    store.register_member("empty", 0, "x")
    store.unregister_member("empty", "x")
    store.compact()
    assert store.stats().dead_entries == 0
    clock.now += 20
    store.expire()
    assert store.region_index("empty") is None
    assert store.region_index("g") == 1
    store.close()
    again = StateStore(tmp_path, log=store_log(), clock=clock, retention_s=10)
    again.load()
    assert again.members("g") == [_name(i) for i in range(1, 50, 2)]
    assert again.groups() == ["g"]
    again.close()
