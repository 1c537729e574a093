"""Pack files: the chunks of one checkpoint, hashed and compressed in parallel, written in file order.

A leaf's bytes are cut at fixed offsets (``chunk_bytes``), not content-defined
boundaries: a training step rewrites tensors in place and never shifts bytes,
so fixed offsets find every unchanged chunk at a fraction of the cost.
Each chunk is hashed (XXH3-128 of its raw bytes in format 4, BLAKE3 in 3,
sha256 in 2) and, when a parent is given, compared with the parent's chunk at
the same place; only chunks that differ
are compressed and written. A chunk the snapshot already proved equal to the
parent's (byte comparison with the kept host copy, ``HostLeaf.known``) takes
the parent's entry without being hashed. Work is spread over a thread pool (the hashes
and zstd release the GIL) with a bounded number of chunks in flight, so the
extra memory is a few chunks, not a second copy of the state.

Each byte is hashed once: a raw chunk's content hash doubles as the hash of
its stored segment, from which the file's digest is derived (see
:func:`manifest.file_root`); only a compressed chunk's (smaller) payload is
hashed a second time, on a worker thread. Compression is adaptive: a chunk is
compressed only when a small sample of it shrinks below ``compress_below`` of
its size, so float weights (~0.92 with zstd, at ~0.5 GB/s per core) are
stored raw while zeros, masks and integer buffers are still compressed.

On a local disk the workers also write: each one writes the chunk it has
just encoded with ``os.pwrite`` at its place in the file. A chunk's place is
the sum of the stored sizes before it, known at once for raw chunks and as
soon as the chunks before it are encoded otherwise (:class:`_Offsets`), so a
worker waits for its predecessors' *sizes*, never for their writes. One
ordered writer thread waiting for each chunk in file order made a save cost
about encode + write (2.8 s for a 2 GiB write phase here); written by the
workers it costs about max(encode, write) (1.0 s). Object stores take a
stream, written in order by one thread. The bytes, segments and digests are
the same either way, whatever order the workers finish in.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from spothop.checkpoint.manifest import (
    ChunkRef,
    Codec,
    Digest,
    FileEntry,
    LeafEntry,
    default_digest,
    file_root,
    segment_digest,
    segment_hasher,
)
from spothop.checkpoint.store import PositionalFile, Store, WriteStream

DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024  # big enough to amortise per-chunk overhead, small for deltas
# An object store takes one stream per pack file, and one stream (one TCP connection, parts sent one
# after another) runs far below what the link can carry; a save is cut into this many files at most,
# uploaded at once, each of at least MIN_STREAM_BYTES (smaller ones are not worth a request).
DEFAULT_UPLOAD_STREAMS = 4
MIN_STREAM_BYTES = 64 * 1024 * 1024
PIECE_BYTES = (
    1024 * 1024
)  # a raw chunk is hashed and written this much at a time (fits a core's L2)
INFLIGHT_PER_WORKER = 2  # chunks queued per worker: keeps all busy, bounds memory
SAMPLE_BYTES = (
    64 * 1024
)  # compressed first to decide a chunk's codec: ~1.5 % of a 4 MiB chunk's cost
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


@dataclass(frozen=True)
class PackSet:
    """The pack files of one checkpoint (one per upload stream) and the leaves they hold, in order."""

    leaves: dict[str, LeafEntry]
    files: tuple[FileEntry, ...]
    chunks_written: int
    chunks_reused: int
    digest: Digest  # what the files and the new chunks were hashed with


def pack_name(index: int) -> str:
    return f"data-{index:05d}.pack"


def write_packs(
    store: Store,
    folder: str,
    leaves: Sequence[HostLeaf],
    *,
    streams: int,
    parent: Mapping[str, LeafEntry] | None,
    level: int | None,
    chunk_bytes: int,
    workers: int,
    cancel: threading.Event,
    compress_below: float = DEFAULT_COMPRESS_BELOW,
    digest: Digest | None = None,
    ready: Callable[[str], None] | None = None,
) -> PackSet:
    """Write ``leaves`` into up to ``streams`` pack files under ``folder``, uploaded at once.

    The leaves are cut into runs of about equal bytes, in order, each run its own pack file
    (:func:`write_pack`) with its share of the encoding workers. A run has at least
    ``MIN_STREAM_BYTES``, so small saves stay one file. A failed run fails the save with its error
    once the others have ended; the caller removes the folder. ``digest`` None: :func:`default_digest`.
    ``ready(key)``, when given, blocks until a leaf's bytes may be read (a copy still being made).
    """
    digest = digest or default_digest()
    groups = _runs(leaves, streams)
    write = functools.partial(
        write_pack,
        store,
        parent=parent,
        level=level,
        chunk_bytes=chunk_bytes,
        cancel=cancel,
        compress_below=compress_below,
        digest=digest,
        ready=ready,
    )
    if len(groups) == 1:
        one = write(f"{folder}/{pack_name(0)}", leaves, workers=workers)
        return PackSet(one.leaves, (one.file,), one.chunks_written, one.chunks_reused, digest)
    share = max(1, workers // len(groups))
    with ThreadPoolExecutor(len(groups), "spothop-ckpt-upload") as uploads:
        futures = [
            uploads.submit(write, f"{folder}/{pack_name(i)}", group, workers=share)
            for i, group in enumerate(groups)
        ]
        wait(futures)
    errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
    if errors:
        raise next((exc for exc in errors if not isinstance(exc, SaveCancelled)), errors[0])
    results = [f.result() for f in futures]
    merged = {key: entry for result in results for key, entry in result.leaves.items()}
    return PackSet(
        {leaf.key: merged[leaf.key] for leaf in leaves},
        tuple(r.file for r in results),
        sum(r.chunks_written for r in results),
        sum(r.chunks_reused for r in results),
        digest,
    )


def _runs(leaves: Sequence[HostLeaf], streams: int) -> list[list[HostLeaf]]:
    """The leaves in order, cut into at most ``streams`` runs of about equal bytes to write (each at
    least ``MIN_STREAM_BYTES``); a leaf is never split. Chunks already known to equal the parent's
    weigh nothing: a delta of one changed tensor is one stream."""
    weights = [_bytes_to_write(leaf) for leaf in leaves]
    total = sum(weights)
    count = max(1, min(streams, total // MIN_STREAM_BYTES))
    if count == 1:
        return [list(leaves)]
    runs: list[list[HostLeaf]] = [[] for _ in range(count)]
    done = 0
    for leaf, weight in zip(leaves, weights, strict=True):
        runs[min(count - 1, done * count // total)].append(leaf)  # by where the leaf starts
        done += weight
    return [run for run in runs if run]


def _bytes_to_write(leaf: HostLeaf) -> int:
    if leaf.data is None:
        return 0
    known = sum(ref.raw_bytes for ref in leaf.known or () if ref is not None)
    return len(leaf.data) - known


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

    sha256: str  # of the raw bytes (the delta content hash), in the pack's :class:`Digest`
    payload: Any
    codec: Codec
    stored_digest: bytes  # the digest of ``payload``: this chunk's leaf of the file's Merkle root


def worth_compressing(view: memoryview, level: int, compress_below: float) -> bool:
    """Whether a sample of ``view`` shrinks to ``compress_below`` of its size or less."""
    sample = view[:SAMPLE_BYTES]
    return len(sample) > 0 and len(_compressor(level).compress(sample)) <= compress_below * len(
        sample
    )


def encode_chunk(
    view: memoryview,
    parent_sha: str | None,
    level: int | None,
    compress_below: float = DEFAULT_COMPRESS_BELOW,
    digest: Digest = Digest.XXH3,
) -> Encoded:
    raw_digest = segment_digest(digest, view)
    sha = raw_digest.hex()
    if sha == parent_sha:
        return Encoded(sha, None, Codec.RAW, raw_digest)
    if level is not None and worth_compressing(view, level, compress_below):
        packed = _compressor(level).compress(view)
        if len(packed) < len(view):
            return Encoded(sha, packed, Codec.ZSTD, segment_digest(digest, packed))
    return Encoded(sha, view, Codec.RAW, raw_digest)


def _chunks(leaf: HostLeaf, chunk_bytes: int) -> Iterator[Bytes]:
    assert leaf.data is not None
    for start in range(0, max(len(leaf.data), 1), chunk_bytes):
        yield leaf.data[start : start + chunk_bytes]


def _parent_shas(leaf: HostLeaf, parent: Mapping[str, LeafEntry] | None) -> list[str | None]:
    old = parent.get(leaf.key) if parent else None
    if old is None or old.dtype != leaf.dtype or old.shape != leaf.shape:
        return []
    return [c.sha256 for c in old.chunks]


def write_pack(
    store: Store,
    relative: str,
    leaves: Sequence[HostLeaf],
    *,
    parent: Mapping[str, LeafEntry] | None,
    level: int | None,
    chunk_bytes: int,
    workers: int,
    cancel: threading.Event,
    compress_below: float = DEFAULT_COMPRESS_BELOW,
    digest: Digest | None = None,
    ready: Callable[[str], None] | None = None,
) -> PackResult:
    """Write ``leaves`` into one pack file at ``relative``; chunks equal to ``parent``'s are referenced.

    On a local disk (POSIX) each worker writes the chunk it has encoded at its place in the file
    (``os.pwrite``); elsewhere (object stores take streams) one thread appends in order. The file's
    bytes are the same either way.
    """
    placed = store.is_local and hasattr(os, "pwrite")
    with (
        _open_target(store, relative, placed) as target,
        ThreadPoolExecutor(workers, "spothop-ckpt") as pool,
    ):
        writer = _Writer(target, relative, compress_below, level, digest or default_digest())
        try:
            refs = writer.write(
                pool, leaves, parent, chunk_bytes, workers * INFLIGHT_PER_WORKER, cancel, ready
            )
        finally:
            writer.abandon()  # after a failure: no worker may wait for an offset that never comes
    out: dict[str, LeafEntry] = {}
    written = reused = 0
    for leaf in leaves:
        if leaf.data is None:
            assert leaf.reuse is not None
            out[leaf.key] = leaf.reuse
            reused += len(leaf.reuse.chunks)
            continue
        out[leaf.key] = LeafEntry(leaf.kind, leaf.dtype, leaf.shape, tuple(refs[leaf.key]))
        written += sum(1 for r in refs[leaf.key] if r.file == relative)
        reused += sum(1 for r in refs[leaf.key] if r.file != relative)
    entry = FileEntry(
        relative,
        file_root(writer.digests, writer.digest),
        writer.offset,
        tuple(writer.segments),
        writer.digest,
    )
    return PackResult(out, entry, written, reused)


@contextmanager
def _open_target(
    store: Store, relative: str, placed: bool
) -> Iterator[WriteStream | PositionalFile]:
    if placed:
        with store.open_positional(relative) as positional:
            yield positional
    else:
        with store.open_write(relative) as stream:
            yield stream


class _Offsets:
    """Where each chunk of a pack starts, known as soon as the stored sizes of all chunks before it are.

    Chunk ``i`` starts at the sum of the stored sizes of chunks ``0..i-1`` (0 for a chunk equal to
    the parent's, which is not stored). A raw chunk's size is known when it is queued; a compressed
    or parent-compared one's only once a worker has encoded it. :meth:`start` waits for the sizes
    before it: workers take chunks in queue order, so every chunk before a waiting one is already
    being encoded (or settled) and the wait ends; :meth:`abandon` ends it after a failure.
    """

    def __init__(self) -> None:
        self._starts = [0]  # the start of chunk i, for every i < len(self._starts)
        self._sizes: dict[int, int] = {}  # settled sizes not yet folded into the starts
        self._changed = threading.Condition()
        self._abandoned = False
        self.cause: BaseException | None = (
            None  # the failure that abandoned the pack, if a worker's
        )

    def settle(self, index: int, size: int) -> None:
        with self._changed:
            self._sizes[index] = size
            while len(self._starts) - 1 in self._sizes:
                self._starts.append(self._starts[-1] + self._sizes.pop(len(self._starts) - 1))
            self._changed.notify_all()

    def start(self, index: int) -> int:
        with self._changed:
            self._changed.wait_for(lambda: index < len(self._starts) or self._abandoned)
            if index >= len(self._starts):
                raise SaveCancelled
            return self._starts[index]

    def abandon(self, cause: BaseException | None = None) -> None:
        with self._changed:
            self._abandoned = True
            self.cause = self.cause or cause
            self._changed.notify_all()


def _encode_and_place(
    target: PositionalFile,
    offsets: _Offsets,
    index: int,
    view: memoryview,
    parent_sha: str | None,
    level: int | None,
    compress_below: float,
    size_known: bool,
    digest: Digest,
) -> tuple[Encoded, int]:
    """Encode chunk ``index`` and write it where it belongs, without waiting for the chunks before it
    to be written (only for their sizes). Returns the encoding and where it landed."""
    if size_known:  # raw, with no parent to compare with: nothing to decide before writing
        return _hash_and_place(target, offsets, index, view, digest)
    if parent_sha is None and level is not None:
        # A full save's chunk: its sample decides the codec before it is hashed, and a raw one is
        # then hashed and written piece by piece too, not hashed whole and read again to write.
        try:
            raw = not worth_compressing(view, level, compress_below)
        except BaseException as exc:
            offsets.abandon(exc)
            raise
        if raw:
            offsets.settle(index, len(view))
            return _hash_and_place(target, offsets, index, view, digest)
    try:
        done = encode_chunk(view, parent_sha, level, compress_below, digest)
    except BaseException as exc:
        offsets.abandon(exc)
        raise
    size = 0 if done.payload is None else len(done.payload)
    if not size_known:
        offsets.settle(index, size)
    start = offsets.start(index)
    if size:
        target.pwrite(done.payload, start)
    return done, start


def _hash_and_place(
    target: PositionalFile, offsets: _Offsets, index: int, view: memoryview, digest: Digest
) -> tuple[Encoded, int]:
    """A raw chunk, hashed and written ``PIECE_BYTES`` at a time: each piece is written right after
    it is hashed, while it is still in the core's cache, so the chunk is read from memory once
    (hash and write of 256 MiB on one core: 0.113 s of CPU this way, 0.124 s chunk by chunk)."""
    try:
        hasher = segment_hasher(digest)
    except BaseException as exc:
        offsets.abandon(exc)
        raise
    start = offsets.start(index)
    for done in range(0, len(view), PIECE_BYTES):
        piece = view[done : done + PIECE_BYTES]
        hasher.update(piece)
        target.pwrite(piece, start + done)
    raw_digest = bytes(hasher.digest())
    return Encoded(raw_digest.hex(), view, Codec.RAW, raw_digest), start


class _Writer:
    """Encodes chunks on a pool and lays them out in file order, recording where each one landed.

    With a :class:`PositionalFile` the workers write their own chunks at offsets settled by
    :class:`_Offsets`; with a stream this thread appends each payload in order. Either way the
    segments, digests and bytes come out in chunk order, so both files are byte-identical.
    """

    def __init__(
        self,
        target: WriteStream | PositionalFile,
        relative: str,
        compress_below: float,
        level: int | None,
        digest: Digest,
    ) -> None:
        self.relative, self.compress_below, self.level = relative, compress_below, level
        self.digest = digest
        self.offset = 0
        self.segments: list[int] = []  # stored lengths of the non-empty payloads, in file order
        self.digests: list[bytes] = []
        self._placed = target if isinstance(target, PositionalFile) else None
        self._stream = None if isinstance(target, PositionalFile) else target
        self._offsets = _Offsets() if self._placed is not None else None
        self._index = 0  # chunks queued so far, over all leaves

    def abandon(self) -> None:
        if self._offsets is not None:
            self._offsets.abandon()

    def write(
        self,
        pool: ThreadPoolExecutor,
        leaves: Sequence[HostLeaf],
        parent: Mapping[str, LeafEntry] | None,
        chunk_bytes: int,
        max_inflight: int,
        cancel: threading.Event,
        ready: Callable[[str], None] | None = None,
    ) -> dict[str, list[ChunkRef]]:
        """Every chunk of every leaf with data, in file order; returns each leaf's chunk refs.

        At most ``max_inflight`` chunks are queued at once, across leaf boundaries: a state of many
        one-chunk tensors keeps every worker busy too."""
        refs: dict[str, list[ChunkRef]] = {}
        pending: deque[
            tuple[
                list[ChunkRef], LeafEntry | None, int, int, Future[tuple[Encoded, int]] | ChunkRef
            ]
        ]
        pending = deque()
        for leaf in leaves:
            if leaf.data is None:
                continue
            if ready is not None:
                ready(leaf.key)
            out = refs[leaf.key] = []
            parent_entry = parent.get(leaf.key) if parent else None
            parent_shas = _parent_shas(leaf, parent)
            for index, view in enumerate(_chunks(leaf, chunk_bytes)):
                if cancel.is_set():
                    raise SaveCancelled
                known = leaf.known[index] if leaf.known is not None else None
                parent_sha = parent_shas[index] if index < len(parent_shas) else None
                pending.append(
                    (
                        out,
                        parent_entry,
                        index,
                        len(view),
                        self._submit(pool, view, known, parent_sha),
                    )
                )
                # Ready refs leave at once; futures wait only when too many are queued (bounds memory).
                while pending and (
                    len(pending) >= max_inflight or isinstance(pending[0][4], ChunkRef)
                ):
                    self._finish(*pending.popleft())
        while pending:
            self._finish(*pending.popleft())
        return refs

    def _submit(
        self, pool: ThreadPoolExecutor, view: Bytes, known: ChunkRef | None, parent_sha: str | None
    ) -> Future[tuple[Encoded, int]] | ChunkRef:
        index, self._index = self._index, self._index + 1
        data = memoryview(view.data)
        if self._offsets is None or self._placed is None:
            if known is not None:
                return known
            return pool.submit(
                lambda: (
                    encode_chunk(data, parent_sha, self.level, self.compress_below, self.digest),
                    -1,
                )
            )
        # Sizes known now are settled now: a chunk equal to the parent's stores nothing, a raw one all.
        size_known = known is not None or (self.level is None and parent_sha is None)
        if size_known:
            self._offsets.settle(index, 0 if known is not None else len(data))
        if known is not None:
            return known
        return pool.submit(
            _encode_and_place,
            self._placed,
            self._offsets,
            index,
            data,
            parent_sha,
            self.level,
            self.compress_below,
            size_known,
            self.digest,
        )

    def _finish(
        self,
        out: list[ChunkRef],
        parent_entry: LeafEntry | None,
        index: int,
        raw: int,
        future: Future[tuple[Encoded, int]] | ChunkRef,
    ) -> None:
        out.append(self._place(parent_entry, index, raw, future))

    def _place(
        self,
        parent_entry: LeafEntry | None,
        index: int,
        raw: int,
        future: Future[tuple[Encoded, int]] | ChunkRef,
    ) -> ChunkRef:
        if isinstance(future, ChunkRef):
            return future
        try:
            done, start = future.result()
        except SaveCancelled:
            # A worker that was waiting for the sizes before it gave up: report why, not that.
            if self._offsets is not None and self._offsets.cause is not None:
                raise self._offsets.cause from None
            raise
        if done.payload is None:
            assert parent_entry is not None
            return parent_entry.chunks[index]
        size = len(done.payload)
        assert self._placed is None or start == self.offset, (
            f"chunk placed at {start}, not {self.offset}"
        )
        ref = ChunkRef(self.relative, self.offset, size, raw, done.sha256, done.codec)
        if size:  # an empty leaf's chunk occupies no bytes and is no segment
            if self._stream is not None:
                self._stream.write(done.payload)
            self.segments.append(size)
            self.digests.append(done.stored_digest)
            self.offset += size
        return ref
