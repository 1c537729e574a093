"""Where checkpoints live: a local folder or any fsspec URL (``s3://bucket/prefix``).

Contract: :meth:`Store.write_atomic` makes a small object appear whole or not
at all (rename on a local disk, a single PUT on an object store) — that is
what the manifest needs to be a commit. Data files are streamed with
:meth:`Store.open_write`; on a local disk they are fsynced before the call
returns, so a manifest never vouches for bytes still in the page cache.
Every failure to write surfaces as :class:`CheckpointWriteError` naming the
location; nothing already stored is modified.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spothop.checkpoint.errors import CheckpointConfigError, CheckpointWriteError
from spothop.paths import atomic_write_text

_WHY = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
        errno.EACCES: "permission denied", errno.EROFS: "the file system is read-only",
        errno.EPERM: "operation not permitted"}


class Store:
    """A checkpoint location. ``url`` is a folder path or an fsspec URL."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        try:
            fs, root = fsspec.core.url_to_fs(url, **dict(storage_options or {}))
        except (ImportError, ValueError) as exc:
            raise CheckpointConfigError(f"checkpoint URL {url!r} cannot be opened: {exc}") from None
        self.url = url
        self.fs: Any = fs
        self.root: str = str(root).rstrip("/")
        self.is_local = isinstance(fs, LocalFileSystem)

    def path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    @contextmanager
    def open_write(self, relative: str) -> Iterator[IO[bytes]]:
        """A writable stream to ``relative``; on a local disk the bytes are fsynced at close."""
        target = self.path(relative)
        try:
            if self.is_local:
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as handle:
                    yield handle
                    handle.flush()
                    os.fsync(handle.fileno())
            else:
                with self.fs.open(target, "wb") as handle:
                    yield handle
        except OSError as exc:
            raise self._write_error(relative, exc) from exc

    def write_atomic(self, relative: str, text: str) -> None:
        """Make ``relative`` hold ``text``: a reader sees the whole new object or nothing new."""
        try:
            if self.is_local:
                atomic_write_text(Path(self.path(relative)), text)
            else:
                self.fs.pipe_file(self.path(relative), text.encode())
        except OSError as exc:
            raise self._write_error(relative, exc) from exc

    def read(self, relative: str) -> bytes:
        data: bytes = self.fs.cat_file(self.path(relative))
        return data

    def open_read(self, relative: str) -> IO[bytes]:
        handle: IO[bytes] = self.fs.open(self.path(relative), "rb")
        return handle

    def exists(self, relative: str) -> bool:
        return bool(self.fs.exists(self.path(relative)))

    def list_dirs(self) -> list[str]:
        """Names of the folders directly under the root (each one a checkpoint, committed or not)."""
        self.fs.invalidate_cache(self.root)
        try:
            entries = self.fs.ls(self.root, detail=True)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory")

    def remove(self, relative: str) -> None:
        """Delete a file or a folder tree; a missing one is not an error."""
        target = self.path(relative)
        with suppress(FileNotFoundError):
            self.fs.rm(target, recursive=True)

    def check_writable(self) -> None:
        """Fail early and clearly if the location cannot be written."""
        probe = ".spothop-write-test"
        self.write_atomic(probe, "ok")
        self.remove(probe)

    def _write_error(self, relative: str, exc: OSError) -> CheckpointWriteError:
        why = _WHY.get(exc.errno or 0, str(exc))
        return CheckpointWriteError(f"cannot write {self.path(relative)} ({self.url}): {why}")
