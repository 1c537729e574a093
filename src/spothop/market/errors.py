"""The market layer's one error: a trace or price file that cannot be read.

``TraceError`` sits under :class:`spothop.errors.ConfigError` in the tree::

    ConfigError
    └── TraceError      a trace / price-history file: missing, wrong shape, unknown format
"""

from __future__ import annotations

from pathlib import Path

from spothop.errors import ConfigError


class TraceError(ConfigError):
    """A trace or price-history file cannot be read; the message names the file, key and fix."""

    def __init__(self, path: str, reason: str, fix: str = "") -> None:
        self.path = path
        self.reason = reason
        self.fix = fix
        super().__init__(f"{path}: {reason}" + (f"; {fix}" if fix else ""))


def require_file(path: Path, fix: str = "check the path") -> None:
    """Raise :class:`TraceError` unless ``path`` is a file (saying so when it is a folder)."""
    if not path.is_file():
        reason = "is a folder, not a file" if path.is_dir() else "no such file"
        raise TraceError(str(path), reason, fix)
