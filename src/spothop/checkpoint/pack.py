"""Pack files: the chunks of one checkpoint, hashed and compressed in parallel, written in order.

A leaf's bytes are cut at fixed offsets (``chunk_bytes``), not content-defined
boundaries: a training step rewrites tensors in place and never shifts bytes,
so fixed offsets find every unchanged chunk at a fraction of the cost.
Each chunk is hashed (sha256 of its raw bytes) and, when a parent is given,
compared with the parent's chunk at the same place; only chunks that differ
are compressed and written. Work is spread over a thread pool (hashlib and
zstd release the GIL) with a bounded number of chunks in flight, so the
extra memory is a few chunks, not a second copy of the state.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

import numpy as np
import zstandard

from spothop.checkpoint.manifest import ChunkRef, Codec, FileEntry, LeafEntry
from spothop.checkpoint.store import Store

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024  # big enough to amortise per-chunk overhead, small for deltas
INFLIGHT_PER_WORKER = 2  # chunks queued per worker: keeps all busy, bounds memory

Bytes = np.ndarray[Any, np.dtype[np.uint8]]


class SaveCancelled(Exception):
    """Internal: a newer, more urgent save asked this one to stop (it leaves no manifest)."""


@dataclass(frozen=True)
class HostLeaf:
    """One array leaf ready to write: its host bytes, or the parent entry it reuses unchanged."""

    key: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    data: Bytes | None  # None: unchanged since the parent (known without reading it)
    reuse: LeafEntry | None = None
    owner: Any = None  # the host copy ``data`` views; kept alive until written


@dataclass(frozen=True)
class PackResult:
    leaves: dict[str, LeafEntry]
    file: FileEntry
    chunks_written: int
    chunks_reused: int


_local = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    # ZstdCompressor objects must not be shared between threads.
    cache: dict[int, zstandard.ZstdCompressor] = _local.__dict__.setdefault("zstd", {})
    if level not in cache:
        cache[level] = zstandard.ZstdCompressor(level=level)
    return cache[level]


def _encode_chunk(view: memoryview, parent_sha: str | None, level: int | None) -> tuple[str, Any, Codec]:
    sha = hashlib.sha256(view).hexdigest()
    if sha == parent_sha:
        return sha, None, Codec.RAW
    if level is not None:
        packed = _compressor(level).compress(view)
        if len(packed) < len(view):
            return sha, packed, Codec.ZSTD
    return sha, view, Codec.RAW


def _chunks(leaf: HostLeaf, chunk_bytes: int) -> Iterator[Bytes]:
    assert leaf.data is not None
    for start in range(0, max(len(leaf.data), 1), chunk_bytes):
        yield leaf.data[start:start + chunk_bytes]


def _parent_shas(leaf: HostLeaf, parent: Mapping[str, LeafEntry] | None) -> list[str | None]:
    old = parent.get(leaf.key) if parent else None
    if old is None or old.dtype != leaf.dtype or old.shape != leaf.shape:
        return []
    return [c.sha256 for c in old.chunks]


def write_pack(store: Store, relative: str, leaves: Sequence[HostLeaf], *, parent: Mapping[str, LeafEntry] | None,
               level: int | None, chunk_bytes: int, workers: int, cancel: threading.Event) -> PackResult:
    """Write ``leaves`` into one pack file at ``relative``; chunks equal to ``parent``'s are referenced."""
    out: dict[str, LeafEntry] = {}
    written = reused = 0
    hasher = hashlib.sha256()
    with store.open_write(relative) as handle, ThreadPoolExecutor(workers, "spothop-ckpt") as pool:
        writer = _Writer(handle, hasher, relative)
        for leaf in leaves:
            if leaf.data is None:
                assert leaf.reuse is not None
                out[leaf.key] = leaf.reuse
                reused += len(leaf.reuse.chunks)
                continue
            refs = writer.write_leaf(pool, leaf, chunk_bytes, _parent_shas(leaf, parent),
                                     parent.get(leaf.key) if parent else None, level,
                                     workers * INFLIGHT_PER_WORKER, cancel)
            out[leaf.key] = LeafEntry(leaf.kind, leaf.dtype, leaf.shape, tuple(refs))
            written += sum(1 for r in refs if r.file == relative)
            reused += sum(1 for r in refs if r.file != relative)
    return PackResult(out, FileEntry(relative, hasher.hexdigest(), writer.offset), written, reused)


class _Writer:
    """Appends encoded chunks in order and records where each one landed."""

    def __init__(self, handle: IO[bytes], hasher: Any, relative: str) -> None:
        self.handle, self.hasher, self.relative, self.offset = handle, hasher, relative, 0

    def write_leaf(self, pool: ThreadPoolExecutor, leaf: HostLeaf, chunk_bytes: int,
                   parent_shas: list[str | None], parent_entry: LeafEntry | None, level: int | None,
                   max_inflight: int, cancel: threading.Event) -> list[ChunkRef]:
        refs: list[ChunkRef] = []
        pending: deque[tuple[int, int, Future[tuple[str, Any, Codec]]]] = deque()
        for index, view in enumerate(_chunks(leaf, chunk_bytes)):
            if cancel.is_set():
                raise SaveCancelled
            parent_sha = parent_shas[index] if index < len(parent_shas) else None
            pending.append((index, len(view), pool.submit(_encode_chunk, memoryview(view.data), parent_sha, level)))
            if len(pending) >= max_inflight:
                refs.append(self._finish(*pending.popleft(), parent_entry))
        while pending:
            refs.append(self._finish(*pending.popleft(), parent_entry))
        return refs

    def _finish(self, index: int, raw: int, future: Future[tuple[str, Any, Codec]],
                parent_entry: LeafEntry | None) -> ChunkRef:
        sha, payload, codec = future.result()
        if payload is None:
            assert parent_entry is not None
            return parent_entry.chunks[index]
        self.handle.write(payload)
        self.hasher.update(payload)
        ref = ChunkRef(self.relative, self.offset, len(payload), raw, sha, codec)
        self.offset += len(payload)
        return ref
