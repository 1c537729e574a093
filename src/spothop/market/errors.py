"""The market layer's one error: a trace or price file that cannot be read.

``TraceError`` sits under :class:`spothop.errors.ConfigError` in the tree::

    ConfigError
    └── TraceError      a trace / price-history file: missing, wrong shape, unknown format
"""

from __future__ import annotations

from spothop.errors import ConfigError


class TraceError(ConfigError):
    """A trace or price-history file cannot be read; the message names the file, key and fix."""

    def __init__(self, path: str, reason: str, fix: str = "") -> None:
        self.path = path
        self.reason = reason
        self.fix = fix
        super().__init__(f"{path}: {reason}" + (f"; {fix}" if fix else ""))
