"""Where checkpoints live: a local folder or any fsspec URL (``s3://bucket/prefix``).

Contract: :meth:`Store.write_atomic` makes a small object appear whole or not
at all (rename on a local disk, a single PUT on an object store) — that is
what the manifest needs to be a commit. Data files are streamed with
:meth:`Store.open_write`; on a local disk they are fsynced before the call
returns, so a manifest never vouches for bytes still in the page cache, and
the manifest's rename is made durable by fsyncing its folder and the root.

Local writes start the kernel's writeback every ``WRITEBACK_WINDOW_BYTES``
(``sync_file_range``, Linux) instead of leaving every dirty page to the final
fsync: the disk then works while later chunks are still being hashed, and the
fsync waits only for the last window. It is a hint: it changes no byte, and
the fsync still decides durability.
Every failure to write surfaces as :class:`CheckpointWriteError` naming the
location; nothing already stored is modified.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any, BinaryIO, Protocol

import fsspec
from fsspec.implementations.local import LocalFileSystem

from spothop.checkpoint.errors import CheckpointConfigError, CheckpointWriteError
from spothop.paths import atomic_write_text

_WHY = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EACCES: "permission denied",
    errno.EROFS: "the file system is read-only",
    errno.EPERM: "operation not permitted",
}

# Bytes written between two writeback kicks: large enough that each kick is one big sequential
# request, small enough that the disk starts within a few chunks of the first write.
WRITEBACK_WINDOW_BYTES = 32 * 1024 * 1024
SYNC_FILE_RANGE_WRITE = 2  # <linux/fs.h>: start writeback of the range's dirty pages, do not wait

SyncFileRange = Callable[[int, int, int, int], int]


def _load_sync_file_range() -> SyncFileRange | None:
    """libc's ``sync_file_range`` (Python's ``os`` lacks it), or None off Linux or without it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    found: SyncFileRange = function
    return found


_sync_file_range = _load_sync_file_range()


class WriteStream(Protocol):
    """What a pack writer needs from :meth:`Store.open_write`: ``write`` all of a bytes-like object."""

    def write(self, data: Any, /) -> int: ...


class _EarlyWriteback:
    """A local file that asks the kernel to start writing each completed window out at once."""

    def __init__(self, handle: BinaryIO, kick: SyncFileRange) -> None:
        self._handle, self._kick = handle, kick
        self._written = self._kicked = 0

    def write(self, data: Any, /) -> int:
        count = self._handle.write(
            data
        )  # a buffered file writes all of it (payloads ≥ its buffer go direct)
        self._written += count
        if self._written - self._kicked >= WRITEBACK_WINDOW_BYTES:
            self._handle.flush()  # the kernel can only write out what it has been given
            # A hint: on failure the pages simply wait for the final fsync, which reports real errors.
            self._kick(
                self._handle.fileno(),
                self._kicked,
                self._written - self._kicked,
                SYNC_FILE_RANGE_WRITE,
            )
            self._kicked = self._written
        return count


class PositionalFile:
    """A local file written at given offsets from several threads at once.

    Each :meth:`pwrite` lands at its own offset (``os.pwrite``: no shared file position, the GIL
    released), so the bytes do not depend on the order the writes finish in. Writeback is started
    on every completed ``WRITEBACK_WINDOW_BYTES`` of the contiguous written prefix, as
    :class:`_EarlyWriteback` does for a stream.
    """

    def __init__(self, fd: int, kick: SyncFileRange | None) -> None:
        self._fd, self._kick = fd, kick
        self._lock = threading.Lock()
        self._ends: dict[int, int] = {}  # written ranges beyond the contiguous prefix: start -> end
        self._prefix = self._kicked = 0

    def pwrite(self, data: Any, offset: int) -> None:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):  # pwrite may write less than asked (signals, huge requests)
            done += os.pwrite(self._fd, view[done:], offset + done)
        if self._kick is None or not len(view):
            return
        with self._lock:
            self._ends[offset] = offset + len(view)
            while self._prefix in self._ends:
                self._prefix = self._ends.pop(self._prefix)
            if self._prefix - self._kicked >= WRITEBACK_WINDOW_BYTES:
                # A hint: on failure the pages simply wait for the final fsync, which reports real errors.
                self._kick(
                    self._fd, self._kicked, self._prefix - self._kicked, SYNC_FILE_RANGE_WRITE
                )
                self._kicked = self._prefix


def _fsync_dir(path: Path) -> None:
    """Make the entries of ``path`` (a new file, a rename) durable; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
    def open_write(self, relative: str) -> Iterator[WriteStream]:
        """A writable stream to ``relative``; on a local disk the bytes are fsynced at close."""
        target = self.path(relative)
        try:
            if self.is_local:
                Path(target).parent.mkdir(parents=True, exist_ok=True)
                with open(target, "wb") as handle:
                    yield (
                        handle
                        if _sync_file_range is None
                        else _EarlyWriteback(handle, _sync_file_range)
                    )
                    handle.flush()
                    os.fsync(handle.fileno())
            else:
                with self.fs.open(target, "wb") as handle:
                    yield handle
        except OSError as exc:
            raise self._write_error(relative, exc) from exc

    @contextmanager
    def open_positional(self, relative: str, size: int | None = None) -> Iterator[PositionalFile]:
        """A new local file to fill with :meth:`PositionalFile.pwrite` (``size`` bytes when known in
        advance); fsynced at close.

        Local stores only (object stores take streams: use :meth:`open_write`)."""
        if not self.is_local:
            raise CheckpointConfigError(
                f"{self.url} is not a local folder: positional writes need one"
            )
        target = Path(self.path(relative))
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                if size is not None:
                    os.ftruncate(
                        fd, size
                    )  # the file's length is known: a short write cannot go unnoticed
                yield PositionalFile(fd, _sync_file_range)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._write_error(relative, exc) from exc

    def write_atomic(self, relative: str, text: str) -> None:
        """Make ``relative`` hold ``text``: a reader sees the whole new object or nothing new."""
        try:
            if self.is_local:
                target = Path(self.path(relative))
                atomic_write_text(target, text)
                # The rename is the commit: fsync its folder (and the root, which gained that folder)
                # so that after a power cut the manifest is there whenever the save returned.
                _fsync_dir(target.parent)
                if target.parent != Path(self.root):
                    _fsync_dir(Path(self.root))
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
        except NotADirectoryError:
            raise self._not_a_folder() from None
        if (
            len(entries) == 1
            and entries[0]["type"] == "file"
            and entries[0]["name"].rstrip("/") == self.root
        ):
            raise self._not_a_folder()  # listing a file lists the file itself
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e["type"] == "directory"
        )

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

    def _not_a_folder(self) -> CheckpointConfigError:
        return CheckpointConfigError(
            f"checkpoint location {self.url} is a file, not a folder: give a folder "
            "(it is created if missing) or an object-store URL such as s3://bucket/run"
        )

    def _write_error(self, relative: str, exc: OSError) -> CheckpointWriteError:
        why = _WHY.get(exc.errno or 0, str(exc))
        return CheckpointWriteError(f"cannot write {self.path(relative)} ({self.url}): {why}")
