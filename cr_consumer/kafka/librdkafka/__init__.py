"""The librdkafka (confluent-kafka) implementation of the client seam."""
