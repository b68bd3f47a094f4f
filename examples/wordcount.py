"""Word count with exactly-once output: a consistent-region pipeline.

Pipeline (``build``): Kafka source (topic ``--param topic=...``, default
``words``, from the beginning) -> flat_map (one record per word of each line,
keeping the line's topic/partition/offset) -> keyed aggregate (count per word)
-> exactly-once file sink (``<out>/<member>-<seq>.jsonl``, published only when
a checkpoint completes).

Each output line is ``{"topic", "partition", "offset", "key": word, "value":
count, "member"}``: the member's running count of that word. A member counts
the words of the partitions it is assigned, so the total of a word is the sum,
over members, of the member's last published count (:func:`totals`). Because
published files hold only what a completed checkpoint covers and every reset
restores each member's counts and replays the input from that checkpoint, the
totals are exact after any member kill, coordinator restart or rebalance.

Run it (embedded broker, 2 members, some text, then the totals checked against
a direct count)::

    .venv/bin/python examples/wordcount.py --lines 20000 --members 2

or against your own cluster and topic, for as long as you like::

    crkafka run examples/wordcount.py --members 3 --bootstrap HOST:9092 --param topic=words
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

from cr_consumer.runtime import KafkaSource, Pipeline, replace


def words_of(record) -> list:
    text = record.value.decode("utf-8", errors="replace") if isinstance(record.value, bytes) else str(record.value)
    return [replace(record, key=w, value=1) for w in text.lower().split()]


def build(ctx) -> Pipeline:
    topic = ctx.param("topic", "words")
    return (
        Pipeline(KafkaSource(topics=[topic], options={"start_position": "earliest"}))
        .flat_map(words_of, name="split")
        .aggregate(lambda r: r.key, lambda count, r: count + 1, 0, name="count")
        .sink(ctx.file_sink())
    )


def totals(out_dir: str | Path) -> Counter:
    """Word -> total count from the published output (sum of members' last counts)."""
    last: dict[tuple[str, str], int] = {}
    for path in sorted(Path(out_dir).glob("*.jsonl")):  # <member>-<seq>.jsonl: per member in seq order
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            last[(doc["member"], doc["key"])] = doc["value"]
    out: Counter = Counter()
    for (_, word), count in last.items():
        out[word] += count
    return out


VOCABULARY = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "kafka",
    "region",
    "checkpoint",
    "reset",
    "drain",
    "exactly",
    "once",
]


def main() -> int:  # pragma: no cover - a demo script
    parser = argparse.ArgumentParser(description="word count with exactly-once output on an embedded broker")
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap", help="use this cluster instead of an embedded broker")
    parser.add_argument("--kill", action="store_true", help="kill -9 one member half way")
    args = parser.parse_args()

    from cr_consumer.runtime.runner.drive import run_until_done
    from cr_consumer.runtime.runner.region_runner import run_pipeline
    from cr_consumer.runtime.runner.region_status import RegionFailed
    from cr_consumer.testing.broker import bootstrap_or_embedded
    from cr_consumer.testing.kafka_util import create_topic, produce, unique_name

    rng = random.Random(7)
    lines = [" ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 8))) for _ in range(args.lines)]
    expected = Counter(w for line in lines for w in line.split())
    work = Path(tempfile.mkdtemp(prefix="wordcount-"))
    with bootstrap_or_embedded(args.bootstrap) as (bootstrap, _):
        topic = create_topic(bootstrap, unique_name("words"), args.partitions)
        produce(bootstrap, topic, (line.encode() for line in lines))
        region = run_pipeline(
            __file__,
            members=args.members,
            bootstrap=bootstrap,
            output_dir=work / "out",
            state_dir=work / "state",
            params={"topic": topic},
            kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        )
        out = work / "out"
        total = sum(expected.values())
        try:
            elapsed = run_until_done(
                region,
                done=lambda: totals(out) == expected,
                progress=lambda: sum(totals(out).values()) / total,
                kill_half_way=args.kill,
            )
        except (RegionFailed, TimeoutError) as exc:
            print(exc, file=sys.stderr)
            return 1
        else:
            print(
                f"{total} words counted exactly once in {elapsed:.1f}s; "
                f"top 5: {totals(out).most_common(5)}; output in {out}"
            )
        finally:
            region.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
