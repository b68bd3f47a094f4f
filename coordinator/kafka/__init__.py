"""Raw Kafka protocol that both processes speak: bounded raw requests
(:mod:`.raw_requests`), record batches read with their transaction markers
(:mod:`.raw_batches`, decided by the pure :mod:`.committed_filter`), ending or
fencing another process's transactions (:mod:`.transactions`), the bounds a
kafka-python transactional producer lacks (:mod:`.bounded_producer`), and a
one-partition topic read only at its end (:mod:`.end_log`). Members use it to
resolve a region's prepared transactions and to verify output; the coordinator may
use it without importing the member side. It imports only ``coordinator.protocol``."""
