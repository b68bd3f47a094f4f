"""The lowest layer, shared by both packages: logging set-up, argparse value types,
small OS helpers (``osutil``: directory fsync, parent-death signal, free port, wake pipe),
polling with a timeout (``waiting``), the ``topic[partition]`` spelling (``partitions``)
and a group's committed offsets as the broker reports them (``group_offsets``).
Modules here import nothing else from ``coordinator`` or ``cr_consumer``.
"""
