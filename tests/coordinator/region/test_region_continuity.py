"""The continuity fence on checkpoint answers (coordinator/region/continuity.py), as a pure unit,
and the wire check of the answers' entries (coordinator/protocol/wire/fields.py)."""

from __future__ import annotations

import pytest

from coordinator.protocol.region.messages import RegionAck
from coordinator.protocol.wire.errors import Invalid
from coordinator.protocol.wire.fields import MAX_CLAIMS, MAX_OFFSET, decode_offset_claims
from coordinator.region.continuity import (
    CLAIMS_SHOWN,
    VIOLATIONS_SHOWN,
    Claim,
    CycleClaims,
    ViolationKind,
    check_claims,
)


def claims(**by_member: list[list]) -> list[Claim]:
    return [Claim.from_entry(member, entry) for member, entries in by_member.items() for entry in entries]


# ----------------------------------------------------------------------------- legitimate answers pass


def test_a_member_keeping_its_partition_continues_from_the_last_consistent_offset():
    result = check_claims(claims(m0=[["t", 0, 10, 15]], m1=[["t", 1, 20, 20]]), [["t", 0, 10], ["t", 1, 20]])
    assert result.ok
    assert result.offsets == [["t", 0, 15], ["t", 1, 20]]


def test_an_empty_claim_beside_the_progressing_one_takes_the_progressing_offset():
    """The minimum (the rule before the fence) would replay m1's records 10..14, which m1 publishes."""
    result = check_claims(claims(m0=[["t", 0, 10, 10]], m1=[["t", 0, 10, 15]]), [["t", 0, 10]])
    assert result.ok
    assert result.offsets == [["t", 0, 15]]


def test_a_partition_the_region_never_saw_accepts_any_start():
    result = check_claims(claims(m0=[["t", 3, 7, 9]]), [["t", 0, 10]])
    assert result.ok
    assert result.offsets == [["t", 0, 10], ["t", 3, 9]]


def test_partitions_nobody_claims_keep_their_last_consistent_offset():
    result = check_claims(claims(m0=[["t", 0, 10, 12]]), [["t", 0, 10], ["t", 1, 20], ["u", 0, 5]])
    assert result.ok
    assert result.offsets == [["t", 0, 12], ["t", 1, 20], ["u", 0, 5]]


def test_no_claims_and_no_last_checkpoint():
    assert check_claims([], []).offsets == []
    assert check_claims([], []).ok


# ----------------------------------------------------------------------------- violations


def test_two_members_that_both_made_progress_fail_the_checkpoint():
    """The deferred-commit zombie answering in the same checkpoint as the partition's new owner."""
    result = check_claims(
        claims(zombie=[["t", 0, 10, 17], ["t", 1, 30, 31]], new=[["t", 0, 10, 14]]), [["t", 0, 10], ["t", 1, 30]]
    )
    assert not result.ok
    [v] = result.violations
    assert (v.kind, v.topic, v.partition, v.expected) == (ViolationKind.TWO_PROGRESSED, "t", 0, 10)
    assert [(c.member, c.start, c.end) for c in v.claims] == [("new", 10, 14), ("zombie", 10, 17)]
    text = result.summary()
    assert "t[0]" in text
    assert "zombie from 10 to 17" in text
    assert "new from 10 to 14" in text


def test_a_claim_that_starts_behind_the_last_consistent_offset_fails():
    """The zombie's claim in the checkpoint after the one its partition's new owner completed."""
    result = check_claims(claims(zombie=[["t", 0, 10, 17]], new=[["t", 0, 14, 14]]), [["t", 0, 14]])
    [v] = result.violations
    assert v.kind is ViolationKind.STALE_START
    assert v.expected == 14


def test_an_empty_claim_with_a_stale_start_fails_too():
    """A member whose position is behind the region's would re-read published records."""
    result = check_claims(claims(m0=[["t", 0, 10, 10]]), [["t", 0, 14]])
    assert [v.kind for v in result.violations] == [ViolationKind.STALE_START]


def test_claims_of_a_partition_the_region_never_saw_must_agree_on_the_start():
    result = check_claims(claims(a=[["t", 5, 0, 0]], b=[["t", 5, 3, 3]]), [])
    assert [v.kind for v in result.violations] == [ViolationKind.STARTS_DIFFER]
    assert check_claims(claims(a=[["t", 5, 0, 4]], b=[["t", 5, 0, 0]]), []).offsets == [["t", 5, 4]]


def test_every_violating_partition_is_listed_and_the_summary_is_bounded():
    n = VIOLATIONS_SHOWN + 5
    cs = claims(a=[["t", p, 0, 1] for p in range(n)], b=[["t", p, 0, 2] for p in range(n)])
    result = check_claims(cs, [["t", p, 0] for p in range(n)])
    assert len(result.violations) == n
    assert result.summary().endswith("and 5 more")


def test_a_partition_claimed_by_many_members_lists_the_first_claims_and_counts_them():
    cs = [Claim(f"m{i:02d}", "t", 0, 0, 1) for i in range(CLAIMS_SHOWN + 3)]
    [v] = check_claims(cs, []).violations
    assert len(v.to_dict()["claims"]) == CLAIMS_SHOWN
    assert v.to_dict()["n_claims"] == CLAIMS_SHOWN + 3
    assert v.text().endswith("and 3 more)")


def test_cycle_claims_collect_answers_until_cleared():
    cycle = CycleClaims()
    cycle.add("m0", [["t", 0, 10, 12]])
    cycle.add("m1", [["t", 0, 10, 11]])
    assert len(cycle) == 2
    assert not cycle.check([["t", 0, 10]]).ok
    cycle.clear()
    cycle.add("m1", [["t", 0, 10, 11]])
    assert cycle.check([["t", 0, 10]]).offsets == [["t", 0, 11]]


# ----------------------------------------------------------------------------- the wire entries


def test_answer_entries_are_accepted():
    assert decode_offset_claims([["t", 0, 1, 5], ["t", 1, 7, 7]]) == [["t", 0, 1, 5], ["t", 1, 7, 7]]
    assert decode_offset_claims([["t", 0, 0, MAX_OFFSET]]) == [["t", 0, 0, MAX_OFFSET]]


@pytest.mark.parametrize(
    ("entries", "names"),
    [
        ("x", "must be a list"),
        ([["t", 0]], "[topic, partition, from, to]"),
        ([["t", 0, 7]], "[topic, partition, from, to]"),  # an offset without the interval's start
        ([["t", 0, 1, 2, 3]], "[topic, partition, from, to]"),
        ([("t", 0, 1, 2)], "[topic, partition, from, to]"),
        ([["t", 0, 5, 4]], "from 5 is after to 4"),
        ([["t", 0, -1, 4]], "from"),
        ([["t", 0, 1, MAX_OFFSET + 1]], "to"),
        ([["t", 0, True, 4]], "from"),
        ([["t", 0, 1.0, 4]], "from"),
        ([["t", -1, 1, 4]], "partition"),
        ([["", 0, 1, 4]], "topic"),
        ([["t\n", 0, 1, 4]], "control character"),
        ([[["t"], 0, 1, 4]], "topic"),  # unhashable: found by the wire fuzzer (an INTERNAL error before)
        ([[{"t": 1}, 0, 7, 8]], "topic"),
        ([[None, 0, 1, 4]], "topic"),
        ([["t", 0, 1, 4], ["t", 0, 4, 5]], "appears twice"),
    ],
)
def test_invalid_answer_entries_are_refused_naming_the_problem(entries, names):
    with pytest.raises(Invalid, match=None) as exc:
        decode_offset_claims(entries)
    assert names in str(exc.value)


def test_an_answer_with_too_many_entries_is_refused():
    with pytest.raises(Invalid, match="more than"):
        decode_offset_claims([["t", p, 0, 0] for p in range(MAX_CLAIMS + 1)])


def test_the_checkpoint_ack_carries_the_claims():
    body = {
        "region": "r",
        "member": "m0",
        "incarnation": "i",
        "command": "checkpoint",
        "seq": 3,
        "attempt": None,
        "ok": True,
        "error": None,
        "offsets": [["t", 0, 4, 9], ["t", 1, 2, 2]],
    }
    ack = RegionAck.from_body(body)
    assert ack.offsets == [["t", 0, 4, 9], ["t", 1, 2, 2]]
    assert RegionAck.from_body(ack.to_body()) == ack
    with pytest.raises(Invalid, match="after to"):
        RegionAck.from_body({**body, "offsets": [["t", 0, 9, 4]]})
