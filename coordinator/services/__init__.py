"""Coordinator services that answer from the state store: the group registry with its
control variables, and the checkpoint merge.
"""
