"""Supervising a region: the runner that starts the coordinator and N member processes,
restarts them with a backoff, and drives a region until its output is complete.
"""
