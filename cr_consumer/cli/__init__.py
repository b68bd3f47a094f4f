"""``crkafka``: the project's command-line tool (``main``) and its sub-commands."""

import sys

from cr_consumer.exit_code import ExitCode


def refuse(command: str, message: str) -> ExitCode:
    """A bad setting of ``crkafka <command>``: one line on stderr, exit code CONFIG."""
    print(f"crkafka {command}: {message}", file=sys.stderr, flush=True)
    return ExitCode.CONFIG
