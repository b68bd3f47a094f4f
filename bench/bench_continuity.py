"""The region controller's cost of a checkpoint's offsets: the continuity check against the merge before it.

At every checkpoint the controller's loop thread merges the members' answers
into the checkpoint's offsets. Before the continuity fence that was
``union_offsets`` (the minimum per partition) plus ``carry_forward``; now it is
``CycleClaims``: each answer's entries become claims, then
``continuity.check_claims`` (rules 1-3 per partition, the carry-forward
included). Both run, alternating, on the same answers: ``--partitions``
partitions spread over ``--members`` members, each member also answering an
empty claim for one partition in ten of another member's (the worst common
case: a revoked partition reported by its old owner). The figure is the median
time per checkpoint of each, and the ratio of the check to the baseline
(median of the per-trial ratios: the machine is noisy).

    .venv/bin/python bench/bench_continuity.py --partitions 10000 --members 10 --trials 7
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from coordinator.region.continuity import CycleClaims
from coordinator.region.model import carry_forward


def union_offsets(triples: list[list[Any]]) -> list[list[Any]]:
    """The merge before the fence (the minimum wins), as it was in coordinator/region/model.py."""
    out: dict[tuple[str, int], int] = {}
    for t, p, o in triples:
        key = (t, p)
        out[key] = o if key not in out else min(out[key], o)
    return [[t, p, o] for (t, p), o in sorted(out.items())]


def answers(partitions: int, members: int) -> tuple[list[list[Any]], dict[str, list[list[Any]]]]:
    """(the last consistent offsets, each member's answer entries [topic, partition, from, to])."""
    last = [["t", p, 1000 + p] for p in range(partitions)]
    by_member: dict[str, list[list[Any]]] = {f"m{m}": [] for m in range(members)}
    for p in range(partitions):
        by_member[f"m{p % members}"].append(["t", p, 1000 + p, 1010 + p])
    for p in range(0, partitions, 10):
        by_member[f"m{(p + 1) % members}"].append(["t", p, 1000 + p, 1000 + p])
    return last, by_member


def fenced(last: list[list[Any]], by_member: dict[str, list[list[Any]]]) -> list[list[Any]]:
    cycle = CycleClaims()
    for member, entries in by_member.items():
        cycle.add(member, entries)
    result = cycle.check(last)
    assert result.ok
    return result.offsets


def before(last: list[list[Any]], triples: list[list[Any]]) -> list[list[Any]]:
    return carry_forward(last, union_offsets(triples))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--members", type=int, default=10)
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=20, help="checkpoints per trial and system")
    args = ap.parse_args()
    last, by_member = answers(args.partitions, args.members)
    triples = [[t, p, to] for entries in by_member.values() for t, p, _, to in entries]
    n_claims = len(triples)
    times: dict[str, list[float]] = {"union+carry (before)": [], "check_claims": []}
    ratios = []
    for trial in range(args.trials):
        order = ["union+carry (before)", "check_claims"][:: 1 if trial % 2 == 0 else -1]
        per: dict[str, float] = {}
        for name in order:
            t0 = time.perf_counter()
            for _ in range(args.repeat):
                if name == "check_claims":
                    fenced(last, by_member)
                else:
                    before(last, [list(e) for e in triples])  # the ack path copied the entries too
            per[name] = (time.perf_counter() - t0) / args.repeat
            times[name].append(per[name])
        ratios.append(per["check_claims"] / per["union+carry (before)"])
    for name, values in times.items():
        print(f"{name:22s} {statistics.median(values) * 1000:8.2f} ms per checkpoint")
    print(
        f"ratio check_claims / before: {statistics.median(ratios):.2f} "
        f"({args.partitions} partitions, {args.members} members, {n_claims} claims)"
    )


if __name__ == "__main__":
    main()
