"""The Quix Streams side of bench/bench_kafka_pipeline.py (``--quix-python``): run in a separate
virtual environment that has quixstreams (never a dependency of this project; it pins
confluent-kafka below the project's version, so it is not installed into the project's
environment)::

    python3 -m venv /tmp/quix-venv
    /tmp/quix-venv/bin/pip install quixstreams

One application, one process: the input topic from the beginning (its own consumer group), the
same map as the crkafka pipeline (the value wrapped in a small JSON document), written to the
output topic, ``processing_guarantee="exactly-once"`` (a Kafka transaction per commit, the
consumed offsets committed inside it) with a commit every ``--commit-s`` seconds. Runs until
killed (SIGTERM: Quix's graceful stop); the parent times it by the group's committed offsets.

    /tmp/quix-venv/bin/python bench/quix_flow.py --bootstrap HOST:PORT --topic IN --out OUT --group G
"""

from __future__ import annotations

import argparse
import tempfile

from quixstreams import Application


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--commit-s", type=float, default=1.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as state:
        app = Application(
            broker_address=args.bootstrap,
            consumer_group=args.group,
            auto_offset_reset="earliest",
            commit_interval=args.commit_s,
            processing_guarantee="exactly-once",
            state_dir=state,
            auto_create_topics=False,
            use_changelog_topics=False,
            loglevel="WARNING",
        )
        source = app.topic(args.topic, key_deserializer="bytes", value_deserializer="bytes")
        sink = app.topic(args.out, key_serializer="bytes", value_serializer="bytes")
        topic = args.topic.encode()
        sdf = app.dataframe(source)
        sdf = sdf.apply(lambda value: b'{"source":"%s","v":"' % topic + value + b'"}')
        sdf.to_topic(sink)
        app.run()


if __name__ == "__main__":
    main()
