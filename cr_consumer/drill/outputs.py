"""Where a drill's pipeline publishes, by sink kind, and how the drill counts and reads it.

The file sink (``--sink file``) publishes files into the drill's ``output/`` directory; the
Kafka sink into an output topic ``<prefix>.out`` with the input's partition count. With
``dead_letter`` the dead-letter sink is of the same kind: ``output/dlq/``
(``pipeline.DEAD_LETTER_SUBDIR``) or the topic ``<prefix>.dlq``. A "." follows the prefix in
the topics' names: they are outside the new-topic scenario's pattern, which a "-" follows.

:class:`DrillOutputs`, one per drill, in the drill's order:

1. names the topics (:meth:`DrillOutputs.of`, before anything starts), creates them
   (:meth:`~DrillOutputs.create`) and gives the pipeline its parameters for them
   (:meth:`~DrillOutputs.params`);
2. while the region runs, counts what is published for the watch loop
   (:meth:`~DrillOutputs.counter`: published files, or committed records of the topic; with a
   dead-letter sink both outputs, summed);
3. once the region is stopped and while the broker still runs, reads the topics
   (:meth:`~DrillOutputs.read_topics`: ``verify_kafka.read_topic``, the dead-letter topic by
   its records' own provenance headers) and writes the output topic's batches as stored to the
   drill's logs (``verify_kafka.write_log_layout``: the post-mortem of a failed verdict needs
   the log as stored);
4. hands the verifier what was published (:meth:`~DrillOutputs.published`,
   :meth:`~DrillOutputs.dead_letters`): the files, read then, or the topics as read in step 3.
   A topic whose read failed counts as empty: that read's error is the drill's.

Every request of the drill's reads of a topic is bounded (:data:`OUTPUT_REQUEST_TIMEOUT_MS`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs

from cr_consumer.drill.config import DrillConfig
from cr_consumer.drill.delivered import Delivered, read_dead_letter_files, read_files
from cr_consumer.drill.pipeline import DEAD_LETTER_SUBDIR, SinkKind
from cr_consumer.drill.provenance import read_dead_letter
from cr_consumer.drill.verify_kafka import KafkaOutputCounter, read_topic, write_log_layout
from cr_consumer.drill.watch_loop import OutputCount, OutputCounter, SummedCount
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.testing.kafka_util import create_topic

#: Bound on each request of the drill's reads of a topic (its metadata, a fetch): a broker that
#: stops answering fails the read instead of hanging it.
OUTPUT_REQUEST_TIMEOUT_MS = 10_000

#: One step of the drill's clean-up: runs ``fn``; its failure is the drill's error, named ``what``.
CleanUpStep = Callable[[str, Callable[[], object]], None]


def _settings(bootstrap: str) -> dict[str, object]:
    return admin_settings(bootstrap, {}, request_timeout_ms=OUTPUT_REQUEST_TIMEOUT_MS, client_id="cr-drill-output")


@attrs.define
class DrillOutputs:
    """The drill's outputs (see the module docstring)."""

    output_dir: Path
    partitions: int
    dead_letter: bool
    #: The Kafka sink's topics (None: the file sink; the dead-letter topic also without ``dead_letter``).
    output_topic: str | None
    dead_letter_topic: str | None
    #: Step 3: the topics as read, by ``"output"`` / ``"dead_letters"``.
    _read: dict[str, Delivered] = attrs.field(factory=dict, init=False)

    @classmethod
    def of(cls, cfg: DrillConfig, prefix: str, output_dir: Path) -> DrillOutputs:
        kafka = cfg.sink is SinkKind.KAFKA
        return cls(
            output_dir=output_dir,
            partitions=cfg.partitions,
            dead_letter=cfg.dead_letter,
            output_topic=f"{prefix}.out" if kafka else None,
            dead_letter_topic=f"{prefix}.dlq" if kafka and cfg.dead_letter else None,
        )

    def create(self, bootstrap: str) -> None:
        for topic in (self.output_topic, self.dead_letter_topic):
            if topic is not None:
                create_topic(bootstrap, topic, self.partitions)

    def params(self) -> dict[str, str]:
        """The drill pipeline's parameters naming the topics it writes."""
        params = {}
        if self.output_topic is not None:
            params["output_topic"] = self.output_topic
        if self.dead_letter_topic is not None:
            params["dead_letter_topic"] = self.dead_letter_topic
        return params

    def counter(self, bootstrap: str) -> OutputCount:
        """Step 2."""
        if self.output_topic is None:
            counts: list[OutputCount] = [OutputCounter(self.output_dir)]
            if self.dead_letter:
                counts.append(OutputCounter(self.output_dir / DEAD_LETTER_SUBDIR))
        else:
            counts = [KafkaOutputCounter(_settings(bootstrap), self.output_topic)]
            if self.dead_letter_topic is not None:
                counts.append(KafkaOutputCounter(_settings(bootstrap), self.dead_letter_topic))
        return counts[0] if len(counts) == 1 else SummedCount(counts)

    def read_topics(self, bootstrap: str, step: CleanUpStep, layout: Path) -> None:
        """Step 3, each read and the layout (into ``layout``) one clean-up ``step``."""
        if self.output_topic is not None:

            def read_output(topic: str = self.output_topic) -> None:
                self._read["output"] = read_topic(_settings(bootstrap), topic)

            step("reading the output topic", read_output)
        if self.dead_letter_topic is not None:

            def read_dead_letters(topic: str = self.dead_letter_topic) -> None:
                self._read["dead_letters"] = read_topic(_settings(bootstrap), topic, provenance=read_dead_letter)

            step("reading the dead-letter topic", read_dead_letters)
        if self.output_topic is not None:

            def write_layout(topic: str = self.output_topic) -> None:
                write_log_layout(_settings(bootstrap), topic, layout)

            step("writing the output topic's layout", write_layout)

    def published(self) -> Delivered:
        """Step 4: the output."""
        if self.output_topic is None:
            return read_files(self.output_dir)
        return self._read.get("output", Delivered())

    def dead_letters(self) -> Delivered | None:
        """Step 4: the dead-letter output (None: no dead-letter sink)."""
        if not self.dead_letter:
            return None
        if self.output_topic is None:
            return read_dead_letter_files(self.output_dir / DEAD_LETTER_SUBDIR)
        return self._read.get("dead_letters", Delivered())


__all__ = ["OUTPUT_REQUEST_TIMEOUT_MS", "CleanUpStep", "DrillOutputs"]
