"""coordinator: the consistent-region control plane (a ZeroMQ server process).

Run it with ``cr-coordinator --state-dir DIR`` (coordinator/cli/main.py); talk to it
with :class:`coordinator.client.CoordinatorClient`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cr-consumer")  # one distribution ships both packages
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
