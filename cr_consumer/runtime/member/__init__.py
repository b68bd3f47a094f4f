"""One member process of a consistent region: its life cycle (``process``), the
controller's commands run on its operators (``executor``), its control channel to
the region controller (``control``; its connection ``coordinator_link``, its requests
``request_book``, its pushed commands ``pushed_commands``; ``join_state``, ``name_claim``),
its set-up (``setup``), its Kafka group state (``group_state``) and the reset-pending watch.
"""
