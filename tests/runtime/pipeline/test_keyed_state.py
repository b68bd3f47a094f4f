"""A user's function over partition-scoped keyed state (``keyed_state.py``) on the real broker,
driven as the member runtime drives it: get/set/delete per input partition, the changes written at
the checkpoint and restored by another member, a raising function's changes undone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from cr_consumer.runtime.pipeline.keyed_state import KeyedState, PartitionState
from cr_consumer.runtime.pipeline.records import Record, replace
from cr_consumer.testing.kafka_util import create_topic

pytestmark = pytest.mark.timeout(120)


def dedupe_and_count(record: Record, state: PartitionState) -> Iterator[Record]:
    """Emits a record the first time its id is seen; counts each customer's distinct orders;
    ``forget`` deletes the id; ``boom`` changes the state, then raises."""
    order_id, customer = record.value["id"], record.key
    if record.value.get("forget"):
        state.delete(("seen", order_id))
        return
    if ("seen", order_id) in state:
        return
    state.set(["seen", order_id], True)  # a list key is kept as a tuple
    state.set(customer, {"orders": state.get(customer, {"orders": 0})["orders"] + 1})
    if record.value.get("boom"):
        raise RuntimeError("boom")
    yield replace(record, value=state.get(customer))


def _op(bootstrap: str, topic: str, group: str, member: str) -> KeyedState:
    return KeyedState(dedupe_and_count, topic=topic, bootstrap=bootstrap, group=group, member=member, name="dedupe")


def _orders(topic: str, partition: int, first: int, orders: list[tuple[str, int]], **extra: Any) -> list[Record]:
    return [
        Record(topic, partition, first + i, key=c, value={"id": order_id, **extra})
        for i, (c, order_id) in enumerate(orders)
    ]


def test_state_is_scoped_to_the_partition_and_restored_by_another_member(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    first = _op(bootstrap, topic, group, "m0")
    first.reset_to_initial_state()
    out = first.process_batch(
        _orders(topic, 0, 0, [("c1", 1), ("c1", 1), ("c1", 2)]) + _orders(topic, 1, 0, [("c1", 1)])
    )
    # the duplicate of order 1 in partition 0 is dropped; partition 1 has its own state
    assert [(r.partition, r.value) for r in out] == [(0, {"orders": 1}), (0, {"orders": 2}), (1, {"orders": 1})]
    first.checkpoint(1)
    first.notify_checkpoint_complete(1)
    first.process_batch(_orders(topic, 0, 3, [("c1", 1)], forget=True))
    first.checkpoint(2)
    first.notify_checkpoint_complete(2)
    assert first.store.tables[0] == {"c1": {"orders": 2}, ("seen", 2): True}

    second = _op(bootstrap, topic, group, "m1")  # another host: nothing local
    second.reset(2, b"")
    out = second.process_batch(_orders(topic, 0, 4, [("c1", 1), ("c1", 2)]))
    assert [r.value for r in out] == [{"orders": 3}]  # 1 was forgotten, 2 was seen
    assert second.store.table(1) == {"c1": {"orders": 1}, ("seen", 1): True}
    first.close()
    second.close()


def test_a_raising_function_leaves_no_trace_in_the_state(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    group = names.group()
    op = _op(bootstrap, topic, group, "m0")
    try:
        op.reset_to_initial_state()
        op.process_batch(_orders(topic, 0, 0, [("c1", 1)]))
        before = dict(op.store.tables[0])
        with pytest.raises(RuntimeError, match="boom"):
            op.process_batch(_orders(topic, 0, 1, [("c1", 2)], boom=True))
        assert op.store.tables[0] == before

        rejected: list[Record] = []
        out = op.process_isolated(
            _orders(topic, 0, 2, [("c1", 3)], boom=True) + _orders(topic, 0, 3, [("c1", 4)]),
            lambda r, exc: rejected.append(r),
        )
        assert [r.offset for r in rejected] == [2]
        assert [r.value for r in out] == [{"orders": 2}]  # order 3 counted nothing
        assert ("seen", 3) not in op.store.tables[0]
        op.checkpoint(1)
        op.notify_checkpoint_complete(1)
        fresh = _op(bootstrap, topic, group, "m1")
        fresh.reset(1, b"")
        assert fresh.store.table(0) == op.store.tables[0]
        fresh.close()
    finally:
        op.close()


def test_a_value_that_is_not_json_fails_the_checkpoint_naming_its_key(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)

    def keep_bytes(record: Record, state: PartitionState) -> list[Record]:
        state.set(record.key, {1: "int keys would come back as strings"})
        return []

    op = KeyedState(keep_bytes, topic=topic, bootstrap=bootstrap, group=names.group(), member="m0")
    try:
        op.reset_to_initial_state()
        op.process_batch([Record(topic, 0, 0, key="k", value=None)])
        with pytest.raises(ValueError, match=r"key 'k'.*JSON object keys must be strings"):
            op.checkpoint(1)
    finally:
        op.close()
