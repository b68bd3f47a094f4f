"""``python -m coordinator``: the same as ``cr-coordinator`` (see coordinator/cli.py)."""

import sys

from coordinator.cli import main

sys.exit(main())
