"""Pack files: the chunks of one checkpoint, hashed and compressed in parallel, written in file order.

A leaf's bytes are cut at fixed offsets (``chunk_bytes``), not content-defined
boundaries: a training step rewrites tensors in place and never shifts bytes,
so fixed offsets find every unchanged chunk at a fraction of the cost.
Each chunk is hashed (sha256 of its raw bytes) and, when a parent is given,
compared with the parent's chunk at the same place; only chunks that differ
are compressed and written. A chunk the snapshot already proved equal to the
parent's (byte comparison with the kept host copy, ``HostLeaf.known``) takes
the parent's entry without being hashed. Work is spread over a thread pool (hashlib and
zstd release the GIL) with a bounded number of chunks in flight, so the
extra memory is a few chunks, not a second copy of the state.

Each byte is hashed once: a raw chunk's content hash doubles as the hash of
its stored segment, from which the file's digest is derived (see
:func:`manifest.file_root`); only a compressed chunk's (smaller) payload is
hashed a second time, on a worker thread. Compression is adaptive: a chunk is
compressed only when a small sample of it shrinks below ``compress_below`` of
its size, so float weights (~0.92 with zstd, at ~0.5 GB/s per core) are
stored raw while zeros, masks and integer buffers are still compressed.

A full raw save to a local disk (the local tier) takes a shorter path: with no
codec and no parent every chunk is stored raw, so its offset in the file is known
before anything is hashed, and each hashing thread writes the chunk it has just
hashed with ``os.pwrite`` at that offset. One ordered writer thread waiting for
hashes in file order made the write phase cost about hash + write (2.8 s for
2 GiB here); written by the hashing threads it costs about max(hash, write)
(1.0 s). The bytes, segments and digests are the same as the ordered writer's
whatever order the threads finish in.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from spothop.checkpoint.manifest import (
    ChunkRef,
    Codec,
    FileEntry,
    LeafEntry,
    file_root,
    sha256_digest,
)
from spothop.checkpoint.store import PositionalFile, Store, WriteStream

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024  # big enough to amortise per-chunk overhead, small for deltas
INFLIGHT_PER_WORKER = 2  # chunks queued per worker: keeps all busy, bounds memory
SAMPLE_BYTES = 64 * 1024  # compressed first to decide a chunk's codec: ~1.5 % of a 4 MiB chunk's cost
# Compress a chunk only if its sample shrinks to this fraction or less. Float weights land at
# ~0.92 with zstd, where 8 % fewer bytes cost ~0.5 GB/s per core: slower than the disk or link.
DEFAULT_COMPRESS_BELOW = 0.9

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
    # Per chunk: the parent's chunk it is known (by byte comparison) to equal, used without hashing;
    # None there (or no tuple at all): hash the chunk and compare content hashes as usual.
    known: tuple[ChunkRef | None, ...] | None = None


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


@dataclass(frozen=True)
class Encoded:
    """One chunk after hashing: ``payload`` None means equal to the parent's chunk (nothing to write)."""

    sha256: str  # of the raw bytes (the delta content hash)
    payload: Any
    codec: Codec
    stored_digest: bytes  # sha256 of ``payload``: this chunk's leaf of the file's Merkle root


def worth_compressing(view: memoryview, level: int, compress_below: float) -> bool:
    """Whether a sample of ``view`` shrinks to ``compress_below`` of its size or less."""
    sample = view[:SAMPLE_BYTES]
    return len(sample) > 0 and len(_compressor(level).compress(sample)) <= compress_below * len(sample)


def encode_chunk(view: memoryview, parent_sha: str | None, level: int | None,
                 compress_below: float = DEFAULT_COMPRESS_BELOW) -> Encoded:
    raw_digest = sha256_digest(view)
    sha = raw_digest.hex()
    if sha == parent_sha:
        return Encoded(sha, None, Codec.RAW, raw_digest)
    if level is not None and worth_compressing(view, level, compress_below):
        packed = _compressor(level).compress(view)
        if len(packed) < len(view):
            return Encoded(sha, packed, Codec.ZSTD, sha256_digest(packed))
    return Encoded(sha, view, Codec.RAW, raw_digest)


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
               level: int | None, chunk_bytes: int, workers: int, cancel: threading.Event,
               compress_below: float = DEFAULT_COMPRESS_BELOW) -> PackResult:
    """Write ``leaves`` into one pack file at ``relative``; chunks equal to ``parent``'s are referenced."""
    # A full raw save to a local disk: every chunk's offset is known before hashing, so the hashing
    # threads write their own chunks (``os.pwrite``, POSIX); otherwise one thread appends in order.
    if (store.is_local and level is None and parent is None and hasattr(os, "pwrite")
            and all(leaf.known is None for leaf in leaves)):
        return _write_positional(store, relative, leaves, chunk_bytes, workers, cancel)
    out: dict[str, LeafEntry] = {}
    written = reused = 0
    with store.open_write(relative) as handle, ThreadPoolExecutor(workers, "spothop-ckpt") as pool:
        writer = _Writer(handle, relative, compress_below)
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
    entry = FileEntry(relative, file_root(writer.digests), writer.offset, tuple(writer.segments))
    return PackResult(out, entry, written, reused)


class _Writer:
    """Appends encoded chunks in order and records where each one landed."""

    def __init__(self, handle: WriteStream, relative: str, compress_below: float) -> None:
        self.handle, self.relative, self.offset, self.compress_below = handle, relative, 0, compress_below
        self.segments: list[int] = []  # stored lengths of the non-empty payloads, in file order
        self.digests: list[bytes] = []

    def write_leaf(self, pool: ThreadPoolExecutor, leaf: HostLeaf, chunk_bytes: int,
                   parent_shas: list[str | None], parent_entry: LeafEntry | None, level: int | None,
                   max_inflight: int, cancel: threading.Event) -> list[ChunkRef]:
        refs: list[ChunkRef] = []
        pending: deque[tuple[int, int, Future[Encoded] | ChunkRef]] = deque()
        for index, view in enumerate(_chunks(leaf, chunk_bytes)):
            if cancel.is_set():
                raise SaveCancelled
            known = leaf.known[index] if leaf.known is not None else None
            if known is not None:  # equal to the parent's chunk: its ref is the answer, kept in order
                pending.append((index, len(view), known))
            else:
                parent_sha = parent_shas[index] if index < len(parent_shas) else None
                pending.append((index, len(view), pool.submit(encode_chunk, memoryview(view.data), parent_sha,
                                                              level, self.compress_below)))
            # Ready refs leave at once; futures wait only when too many are queued (bounds memory).
            while pending and (len(pending) >= max_inflight or isinstance(pending[0][2], ChunkRef)):
                refs.append(self._finish(*pending.popleft(), parent_entry))
        while pending:
            refs.append(self._finish(*pending.popleft(), parent_entry))
        return refs

    def _finish(self, index: int, raw: int, future: Future[Encoded] | ChunkRef,
                parent_entry: LeafEntry | None) -> ChunkRef:
        if isinstance(future, ChunkRef):
            return future
        done = future.result()
        if done.payload is None:
            assert parent_entry is not None
            return parent_entry.chunks[index]
        size = len(done.payload)
        ref = ChunkRef(self.relative, self.offset, size, raw, done.sha256, done.codec)
        if size:  # an empty leaf's chunk occupies no bytes and is no segment
            self.handle.write(done.payload)
            self.segments.append(size)
            self.digests.append(done.stored_digest)
            self.offset += size
        return ref


@dataclass(frozen=True)
class _Slot:
    """A raw chunk's place in a pack file, fixed before anything is hashed."""

    leaf: int  # index into the leaves
    view: Bytes
    offset: int


def _layout(leaves: Sequence[HostLeaf], chunk_bytes: int) -> tuple[list[_Slot], list[int], int]:
    """Every chunk to write with its offset, the stored segment sizes, and the file's size."""
    slots: list[_Slot] = []
    segments: list[int] = []
    offset = 0
    for index, leaf in enumerate(leaves):
        if leaf.data is None:
            continue
        for view in _chunks(leaf, chunk_bytes):
            slots.append(_Slot(index, view, offset))
            if len(view):  # an empty leaf's chunk occupies no bytes and is no segment
                segments.append(len(view))
                offset += len(view)
    return slots, segments, offset


def _hash_and_place(target: PositionalFile, slot: _Slot) -> bytes:
    view = memoryview(slot.view.data)
    digest = sha256_digest(view)
    if len(view):
        target.pwrite(view, slot.offset)
    return digest


def _write_positional(store: Store, relative: str, leaves: Sequence[HostLeaf], chunk_bytes: int, workers: int,
                      cancel: threading.Event) -> PackResult:
    """A full raw pack on a local disk: each thread hashes a chunk and writes it at its own offset.

    Every chunk is stored raw (no codec, no parent), so its offset is the sum of the sizes before
    it and is known before anything is hashed. Each worker then writes the chunk it has just
    hashed with ``pwrite`` while the others hash the next ones: no writer thread waits for hashes
    in file order, and the file is byte-identical to the ordered writer's whatever order the
    threads finish in (the digests are collected by position, so the root is the same too).
    """
    slots, segments, offset = _layout(leaves, chunk_bytes)
    out: dict[str, LeafEntry] = {leaf.key: leaf.reuse for leaf in leaves if leaf.data is None and leaf.reuse}
    digests: list[bytes] = []
    max_inflight = workers * INFLIGHT_PER_WORKER
    with store.open_positional(relative, offset) as target, ThreadPoolExecutor(workers, "spothop-ckpt") as pool:
        pending: deque[Future[bytes]] = deque()
        try:
            for slot in slots:
                if cancel.is_set():
                    raise SaveCancelled
                pending.append(pool.submit(_hash_and_place, target, slot))
                if len(pending) >= max_inflight:
                    digests.append(pending.popleft().result())
            while pending:
                digests.append(pending.popleft().result())
        finally:
            for future in pending:
                future.cancel()
    refs: dict[int, list[ChunkRef]] = {}
    for slot, digest in zip(slots, digests, strict=True):
        size = len(slot.view)
        refs.setdefault(slot.leaf, []).append(ChunkRef(relative, slot.offset, size, size, digest.hex(), Codec.RAW))
    for index, leaf in enumerate(leaves):
        if leaf.data is not None:
            out[leaf.key] = LeafEntry(leaf.kind, leaf.dtype, leaf.shape, tuple(refs[index]))
    ordered = {leaf.key: out[leaf.key] for leaf in leaves}
    stored = [d for slot, d in zip(slots, digests, strict=True) if len(slot.view)]
    entry = FileEntry(relative, file_root(stored), offset, tuple(segments))
    reused = sum(len(leaf.reuse.chunks) for leaf in leaves if leaf.data is None and leaf.reuse is not None)
    return PackResult(ordered, entry, len(slots), reused)
