"""Checkpoint/reset drills: run a pipeline, inject a fault, verify exactly-once
output independently (see docs/drills.md)."""
