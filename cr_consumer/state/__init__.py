"""Keyed state that follows its Kafka partition: the changelog each partition's table is written
to at a checkpoint (:mod:`.changelog`: record format, writer, topic) and the rule that rebuilds a
partition's table at a checkpoint from it (:mod:`.restore`). Building blocks only: no operator
uses them yet."""
