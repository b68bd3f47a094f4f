"""Command-line tools of the control plane: ``cr-coordinator`` (``main``) and
``crkafka status`` (``status``, with per-partition lag from the broker in ``lag``).
"""
