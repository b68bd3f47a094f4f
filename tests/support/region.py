"""A pipeline run as a region of member processes (``Region``), and its published output:
write a pipeline module, read the file sink's rows, wait for them, check them exactly once."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.runtime.runner.region_status import RegionFailed

T = TypeVar("T")

KAFKA = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}


def write_module(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return str(path)


def published(out: Path) -> list[dict]:
    rows: list[dict] = []
    for path in sorted(out.glob("*.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text().splitlines())
    return rows


def check_exactly_once(rows: list[dict], topic: str, per_partition: dict[int, int]) -> None:
    by_part: dict[int, list[int]] = {}
    for r in rows:
        assert r["topic"] == topic
        by_part.setdefault(r["partition"], []).append(r["offset"])
    for p, n in per_partition.items():
        offsets = by_part.get(p, [])
        dups = [o for o, c in Counter(offsets).items() if c > 1]
        assert not dups, f"partition {p}: duplicated offsets {dups[:10]} ({len(dups)} in all)"
        missing = sorted(set(range(n)) - set(offsets))
        assert not missing, f"partition {p}: missing offsets {missing[:10]} ({len(missing)} in all)"
        assert sorted(offsets) == list(range(n))


def wait_region(
    region: Region, condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1
) -> T:
    """``condition()``'s first true result; ``RegionFailed`` at once if the region fails first,
    and after ``timeout`` an AssertionError that names ``what`` and the region's status."""

    def met() -> T | None:
        if region.failed:
            raise RegionFailed(region.failed)
        return condition()

    try:
        return wait_until(met, timeout, what, interval=interval)
    except WaitTimeout as exc:
        raise AssertionError(f"{exc}; status {region.status()}") from exc


def wait_rows(out: Path, n: int, timeout: float, region: Region) -> list[dict]:
    """The published rows once there are ``n``; ``RegionFailed`` at once if the region fails first."""

    def enough() -> list[dict] | None:
        rows = published(out)
        return rows if len(rows) >= n else None

    try:
        return wait_region(region, enough, timeout, f"{n} published records")
    except AssertionError as exc:
        raise AssertionError(f"only {len(published(out))} of {n} records published within {timeout}s; {exc}") from exc


def make_region(tmp_path, bootstrap, pipeline, topic, members, **kw) -> Region:
    settings = dict(
        members=members,
        bootstrap=bootstrap,
        output_dir=tmp_path / "out",
        state_dir=tmp_path / "state",
        period_s=0.5,
        member_timeout_s=3.0,
        drain_timeout_s=10.0,
        reset_timeout_s=10.0,
        params={"topic": topic},
        kafka=KAFKA,
    )
    settings.update(kw)
    return Region(pipeline, **settings)
