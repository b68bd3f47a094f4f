"""The kafka-python implementation of the client seam, and its work-arounds for kafka-python defects."""
