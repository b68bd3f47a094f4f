"""``python -m coordinator``: the same as ``cr-coordinator`` (see coordinator/cli/main.py)."""

import sys

from coordinator.cli.main import main

sys.exit(main())
