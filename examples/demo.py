"""``make demo``: the project in one run.

Parts run in order; each returns True when it succeeded, and the demo exits 0
only if every part did. Add a part by writing ``def name_part() -> bool`` and
appending it to ``PARTS``.

region_part: a consistent region of three member processes (``crkafka member``
running the drill pipeline: Kafka source -> exactly-once file sink) and a
coordinator process, on the embedded broker (or ``$KAFKA_BOOTSTRAP_SERVERS``).
Half way through the input, one member is killed with SIGKILL; the runtime's
runner restarts it, the region resets to its last consistent checkpoint,
and the output is verified independently: every produced record exactly once.
It prints the drill report and where the timeline plot is. Every process it
starts (broker, coordinator, members) is stopped before it returns.

state_part: keyed state that follows its partition (``examples/order_totals.py``): orders
keyed by customer, a region of three members whose partitioned aggregate keeps each input
partition's table on a Kafka changelog; one member is killed -9 half way; every customer's last
emitted total must equal the total computed from the orders (no partial states to add up).

spark_part: the Spark pipeline (``examples/spark_wordcount.py``): the
``crkafka`` Structured Streaming source over consumer operators, the
coordinator as its own process, a word count written exactly once per batch
id; the query process is killed with SIGKILL in the middle of a batch and
restarted from the same checkpoint location; then the output is checked to
hold every input record exactly once, and the group's committed offsets are
shown as any Kafka tool sees them. Needs Java 17 (Spark 4.3).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: The region part's Kafka client for its members ("kafka-python" or "librdkafka";
#: unset or empty: the default, kafka-python). The Spark part's executors use librdkafka.
KAFKA_CLIENT = os.environ.get("DEMO_KAFKA_CLIENT") or None
#: The values DEMO_KAFKA_CLIENT may take.
KAFKA_CLIENTS = ("kafka-python", "librdkafka")


class DemoSettingError(ValueError):
    """A DEMO_* environment variable the demo cannot run with; the message says what to set."""


def checked_kafka_client(value: str | None) -> str | None:
    """DEMO_KAFKA_CLIENT, checked before anything starts: None (the default) or one of
    KAFKA_CLIENTS whose library is installed; DemoSettingError naming the allowed values."""
    if value is None:
        return None
    if value not in KAFKA_CLIENTS:
        raise DemoSettingError(
            f"DEMO_KAFKA_CLIENT={value!r} is not a Kafka client of the demo: use "
            f"{' or '.join(KAFKA_CLIENTS)} (unset: kafka-python)"
        )
    if value == "librdkafka" and importlib.util.find_spec("confluent_kafka") is None:
        raise DemoSettingError(
            "DEMO_KAFKA_CLIENT=librdkafka needs confluent-kafka: "
            ".venv/bin/pip install -e '.[librdkafka]' (or use kafka-python)"
        )
    return value


@functools.cache
def out_dir() -> Path:
    """Where the demo writes its outputs, reports and plots: a fresh directory per
    run (made when the first part needs it), so a second `make demo` never sees the
    first one's output or checkpoints."""
    return Path(os.environ.get("DEMO_OUT") or tempfile.mkdtemp(prefix="crkafka-demo-"))


def region_part() -> bool:
    from cr_consumer.drill.scenarios import DrillConfig, run_drill

    print("== consistent region: 3 members, kill -9 of one member half way ==", flush=True)
    cfg = DrillConfig(
        scenario="kill-member",
        members=3,
        partitions=8,
        messages=60_000,
        rate=8_000.0,
        fault_at=0.5,
        seed=2024,
        out=out_dir() / "region",
        timeout_s=150.0,
        kafka_client=KAFKA_CLIENT,
    )
    report = run_drill(cfg)
    shown = {k: v for k, v in report.items() if k not in ("examples",)}
    print(json.dumps(shown, indent=2))
    verdict = "exactly once: nothing missing, nothing duplicated" if report["ok"] else "VERIFICATION FAILED"
    print(
        f"\nregion demo: {verdict}; produced {report['produced']}, delivered {report['delivered']}, "
        f"missing {report['missing']}, duplicates {report['duplicates']}, resets {report['resets']}, "
        f"checkpoints {report['checkpoints']}"
    )
    print(f"timeline plot: {report['plot']}")
    print(f"outputs and logs: {report['out_dir']}", flush=True)
    return bool(report["ok"])


def state_part() -> bool:
    sys.path.insert(0, str(ROOT / "examples"))
    import order_totals

    print("\n== keyed state on Kafka: order totals per customer, kill -9 of one member half way ==", flush=True)
    return bool(order_totals.run(20_000, 3, 6, None, True))


def spark_part() -> bool:
    sys.path.insert(0, str(ROOT / "examples"))
    import spark_wordcount

    return spark_wordcount.demo_part(workdir=out_dir() / "spark", records=20_000)


PARTS = [region_part, state_part, spark_part]


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:  # every setting is checked before a broker or a process is started
        checked_kafka_client(KAFKA_CLIENT)
    except DemoSettingError as exc:
        print(f"make demo: {exc}", file=sys.stderr)
        return 2
    results = {}
    for part in PARTS:
        try:
            results[part.__name__] = part()
        except Exception:  # one part's crash is reported; later parts still run
            logging.exception("demo part %s failed", part.__name__)
            results[part.__name__] = False
    print("\ndemo parts:", ", ".join(f"{k}: {'ok' if v else 'FAILED'}" for k, v in results.items()))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
