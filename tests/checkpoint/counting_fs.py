"""An in-memory fsspec filesystem that records every read, so a test can say which store was read.

``countmem://<bucket>/<path>``: each bucket stands for one region's object store.
:data:`READS` lists the paths whose bytes were read (``cat_file``, ``open`` for reading),
in order; :func:`reads_of` counts those under one bucket.
"""

from __future__ import annotations

from typing import Any, ClassVar

import fsspec
from fsspec.implementations.memory import MemoryFileSystem

PROTOCOL = "countmem"
READS: list[str] = []


class CountingMemoryFileSystem(MemoryFileSystem):
    protocol = (PROTOCOL,)
    store: ClassVar[dict[str, Any]] = {}  # fsspec keeps a memory filesystem class-level
    pseudo_dirs: ClassVar[list[str]] = [""]

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith(f"{PROTOCOL}://"):
            path = path[len(PROTOCOL) + 3 :]
        return super()._strip_protocol(path)

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        READS.append(self._strip_protocol(path))
        return super().cat_file(path, start, end, **kwargs)

    def _open(self, path: str, mode: str = "rb", *args: Any, **kwargs: Any) -> Any:
        if "r" in mode:
            READS.append(self._strip_protocol(path))
        return super()._open(path, mode, *args, **kwargs)


def reset() -> None:
    """Forget every file and read (fsspec caches filesystem instances, so the store is shared)."""
    CountingMemoryFileSystem.store.clear()
    CountingMemoryFileSystem.pseudo_dirs[:] = [""]
    READS.clear()


def reads_of(bucket: str, data_only: bool = False) -> int:
    """Reads under ``/<bucket>/``; ``data_only``: pack files only (not manifests or records)."""
    return sum(
        1
        for p in READS
        if p.startswith(f"/{bucket}/")
        and not (data_only and (p.endswith(".json") or "RESTORE-" in p))
    )


def write_bytes(path: str, data: bytes) -> None:
    CountingMemoryFileSystem().pipe_file(path, data)


def read_bytes(path: str) -> bytes:
    data: bytes = MemoryFileSystem.cat_file(CountingMemoryFileSystem(), path)
    return data


fsspec.register_implementation(PROTOCOL, CountingMemoryFileSystem, clobber=True)
