"""The lowest layer, shared by both packages: logging set-up, argparse value types and
small OS helpers (``osutil``: directory fsync, parent-death signal, free port, wake pipe).
Modules here import nothing else from ``coordinator`` or ``cr_consumer``.
"""
