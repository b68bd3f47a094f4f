"""``cr-coordinator``: run the coordinator process in the foreground (or make CURVE keys).

    cr-coordinator --bind tcp://127.0.0.1:5570 --state-dir DIR [--http 127.0.0.1:9570]
                   [--state file|kafka --kafka-bootstrap HOST:PORT --log-topic NAME
                    [--log-replication-factor 3] [--log-min-insync-replicas 2] [--log-write-timeout 10s]
                    [--log-lease 5s] [--standby] [--advertise tcp://HOST:PORT]]
                   [--retention 7d] [--curve-secret-key FILE --curve-allow DIR_OR_FILE]
                   [--resolve-kafka-config FILE]
                   [--allow-remote] [--max-frame-bytes N] [--log-level INFO] [--truncate-corrupt]
                   [--max-connections N] [--handshake-timeout 10s]
                   [--max-groups N] [--max-members-per-group N] [--max-control-variables-per-group N]
                   [--max-regions N] [--max-pending-merges N] [--max-pending-merge-bytes N]
                   [--member-lease 1h] [--region-expiry 7d] [--gc-policy freeze|none]
                   [--compact-min-bytes N] [--compact-dead-ratio R] [--fault-point STEP:pause|crash]
    cr-coordinator keygen --out DIR [--name NAME]

The flags: ``flags.py`` (each flag) and ``checks.py`` (what they mean together, start-up
step 1); start-up and shutdown: ``serve.py``; ``keygen``: here.
"""

from __future__ import annotations

import argparse
import logging
import sys

from coordinator.cli.checks import parse_args
from coordinator.cli.serve import serve
from coordinator.protocol import curve_keys
from coordinator.protocol.common.logging_setup import setup_logging
from coordinator.store.log.frame import LogError

log = logging.getLogger(__name__)


def build_keygen_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cr-coordinator keygen", description="write a CURVE keypair")
    p.add_argument("--out", required=True, help="directory for NAME.key (public) and NAME.key_secret")
    p.add_argument("--name", default="coordinator", help="file name stem (default 'coordinator')")
    return p


def keygen(argv: list[str]) -> int:
    args = build_keygen_parser().parse_args(argv)
    try:
        public, secret = curve_keys.keygen(args.out, args.name)
    except curve_keys.SecurityConfigError as exc:  # a key already there
        print(f"cr-coordinator keygen: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # --out cannot be created or written
        print(f"cr-coordinator keygen: cannot write keys to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"public key: {public}\nsecret key: {secret}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keygen"]:
        return keygen(argv[1:])
    args = parse_args(argv)
    setup_logging(args.level, args.log_format)
    try:
        return serve(args)
    except (OSError, curve_keys.SecurityConfigError, LogError) as exc:
        log.error("cannot start: %s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
