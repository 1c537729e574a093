"""The market layer's one error: a trace or price file that cannot be read.

``TraceError`` sits under :class:`spothop.errors.ConfigError` in the tree::

    ConfigError
    └── TraceError      a trace / price-history file: wrong shape, unknown format
        └── TraceNotFound   the file or folder named does not exist (also a NotFoundError: exit 3)
"""

from __future__ import annotations

from pathlib import Path

from spothop.errors import EXIT_NOT_FOUND, ConfigError, NotFoundError


class TraceError(ConfigError):
    """A trace or price-history file cannot be read; the message names the file, key and fix."""

    def __init__(self, path: str, reason: str, fix: str = "") -> None:
        self.path = path
        self.reason = reason
        self.fix = fix
        super().__init__(f"{path}: {reason}" + (f"; {fix}" if fix else ""))


class TraceNotFound(TraceError, NotFoundError):
    """The trace or price file (or folder of traces) named does not exist."""

    exit_code = EXIT_NOT_FOUND


def require_file(path: Path, fix: str = "check the path") -> None:
    """Raise :class:`TraceError` unless ``path`` is a file (saying so when it is a folder)."""
    if path.is_dir():
        raise TraceError(str(path), "is a folder, not a file", fix)
    if not path.is_file():
        raise TraceNotFound(str(path), "no such file", fix)
