"""Command-line tools of the control plane: ``cr-coordinator`` (``main``; its flags in
``flags`` and ``checks``, the process it runs in ``serve``) and ``crkafka status``
(``status``, with per-partition lag from the broker in ``lag``).
"""
