"""Where spothop keeps its files on this machine.

Everything lives under one folder, ``$SPOTHOP_HOME`` (default ``~/.spothop``),
so a test, a CI run or a second user can point spothop elsewhere with one
variable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def spothop_home() -> Path:
    """The folder spothop writes to: ``$SPOTHOP_HOME``, else ``~/.spothop``."""
    configured = os.environ.get("SPOTHOP_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".spothop"


def user_catalog_dir() -> Path:
    """Imported catalogs (``spothop catalog import``) live here, one CSV per provider."""
    return spothop_home() / "catalog"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new, never half.

    The data goes to a temporary file in the same folder, is flushed to disk,
    and is renamed over the target (rename is atomic on POSIX).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
