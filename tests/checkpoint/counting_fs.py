"""An in-memory store that records every read, so a test can say which region's store was read.

``countmem://<bucket>/<path>``: each bucket stands for one region's object store
(:mod:`spothop.testing.memory_store`). :data:`READS` lists the paths read, in order;
:func:`reads_of` counts those under one bucket. While :data:`REPLICATION_GATE` is
closed (cleared), reads made by the replication thread wait for it to open.
"""

from __future__ import annotations

import threading

from spothop.testing.memory_store import memory_filesystem

READS: list[str] = []
REPLICATION_GATE = threading.Event()
REPLICATION_GATE.set()


def _record(path: str, size: int) -> None:
    READS.append(path)
    if threading.current_thread().name.startswith("spothop-ckpt-replicate"):
        REPLICATION_GATE.wait(60)


FS = memory_filesystem("countmem", _record)


def reset() -> None:
    """Forget every file and read (fsspec caches filesystem instances; the store is the class's)."""
    FS.clear()
    READS.clear()
    REPLICATION_GATE.set()


def reads_of(bucket: str, data_only: bool = False) -> int:
    """Reads under ``/<bucket>/``; ``data_only``: pack files only (not manifests or records)."""
    return sum(
        1
        for p in READS
        if p.startswith(f"/{bucket}/")
        and not (data_only and (p.endswith(".json") or "RESTORE-" in p))
    )


def write_bytes(path: str, data: bytes) -> None:
    FS().pipe_file(path, data)


def read_bytes(path: str) -> bytes:
    data: bytes = FS.store[path].getvalue()
    return data
