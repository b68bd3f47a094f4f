"""The Kafka client layer: the client seam and its two implementations, client
properties from the user (and keeping their secrets out of sight), the one set
of rules those properties are checked by, and the start position the operator
and the Spark source share.
"""
