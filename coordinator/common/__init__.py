"""The lowest layer, shared by both packages: logging set-up and argparse value types.
Modules here import nothing else from ``coordinator`` or ``cr_consumer``.
"""
