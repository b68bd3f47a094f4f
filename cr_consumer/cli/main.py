"""``crkafka``: the project's command-line tool.

Sub-commands live in the module that owns the concern (:data:`COMMANDS`
names each one's module and help); this file only wires them. Each command
module exposes ``add_arguments(parser)`` and ``run(args) -> int`` (the process
exit code).

Errors (a bad flag, a bad setting, a missing optional dependency) are one
line on stderr and exit code 2; logging is set up once here
(``coordinator.protocol.common.logging_setup``: ``--log-level``, ``--log-format``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from coordinator.protocol.common.logging_setup import add_logging_arguments, setup_logging
from cr_consumer import __version__
from cr_consumer.cli import refuse

#: name -> (module, help). The module provides add_arguments(parser) and run(args).
COMMANDS: dict[str, tuple[str, str]] = {
    "broker": ("cr_consumer.cli.broker", "run an embedded Kafka-protocol broker on loopback"),
    "status": ("coordinator.cli.status", "regions, members, Kafka lag and merges of a coordinator (--watch, --json)"),
    "run": ("cr_consumer.cli.run", "run a pipeline as a region of N member processes"),
    "member": ("cr_consumer.cli.member", "run one member process of a pipeline"),
    "drill": ("cr_consumer.cli.drill", "run a checkpoint/reset fault drill and verify the output"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="crkafka", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_logging_arguments(parser)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, allow_abbrev=False)
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            p.set_defaults(_module=None, _missing=module)
            continue
        mod.add_arguments(p)
        p.set_defaults(_module=mod)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    if args._module is None:
        return refuse(args.command, f"not available in this build ({args._missing})")
    return int(args._module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
