"""The seglog command line and benchmarks.

Only the entry point is re-exported: ``import seglog`` (every command's start) stays light, and
each command loads what it needs itself.
"""

from seglog.cli import PROG as PROG
from seglog.cli import CommandUnavailableError as CommandUnavailableError
from seglog.cli import main as main

__all__ = ["PROG", "CommandUnavailableError", "main"]
