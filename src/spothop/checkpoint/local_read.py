"""Reading a local pack file with every core: each worker reads, hashes and decodes its own segments.

Contract: :func:`read_segments` returns the digests of every segment of the file, in file order,
after the bytes of each segment that a leaf needs are in that leaf's buffer; it raises
:class:`CheckpointCorrupt` when the file is not the size its manifest says, and lets the caller
check the digests against the file's root (nothing is trusted before that).

Why this shape: a restore costs a read (the kernel's copy, and the faults of fresh destination
pages) plus a hash of every byte, and the two cost about the same CPU time here (256 MiB: 0.07 s
each). One thread reading while a pool hashed left a core idle whenever the reader waited for the
interpreter lock, and hashed each segment after it had left the cache. Here each worker takes the
next segment in file order and reads it with ``preadv`` straight into its destination (or into a
scratch buffer of its own for a compressed segment or one no leaf needs), ``SUB_READ_BYTES`` at a
time, hashing each piece right after reading it while it is still in the core's cache; so the
reads and the hashes of different segments run on every core at once, and on a machine whose
other core is busy the work is no more than one read plus one cache-hot hash.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import numpy as np
import zstandard

from spothop.checkpoint.errors import CheckpointCorrupt
from spothop.checkpoint.manifest import ChunkRef, Codec, FileEntry, segment_hasher

# Read and hashed in pieces of this size: the piece is still in the core's cache (L2 here is
# 2 MiB a core) when it is hashed. 256 MiB read and hashed on one core: 0.127 s CPU in 1 MiB pieces,
# 0.139-0.150 s reading a whole 4 MiB segment (or a 16 MiB batch) first.
SUB_READ_BYTES = 1024 * 1024
Targets = Mapping[tuple[int, int], list[tuple[ChunkRef, memoryview]]]

_scratch = threading.local()


def _scratch_buffer(length: int) -> memoryview:
    """A per-thread buffer of at least ``length`` bytes, reused across segments: faulting fresh pages
    for bytes that are only hashed (or decompressed elsewhere) would cost as much as reading them."""
    buffer: np.ndarray[Any, np.dtype[np.uint8]] | None = getattr(_scratch, "buffer", None)
    if buffer is None or len(buffer) < length:
        buffer = _scratch.buffer = np.empty(length, dtype=np.uint8)
    return memoryview(buffer.data)[:length]


def read_segments(
    fd: int,
    entry: FileEntry,
    segments: tuple[int, ...],
    chunks: Targets,
    checkpoint_id: str,
    pool: ThreadPoolExecutor,
    workers: int,
) -> list[bytes]:
    """Every segment's raw digest, in order, each read once (see the module's contract)."""
    size = os.fstat(fd).st_size
    if size != entry.size_bytes:
        more = "more bytes than the" if size > entry.size_bytes else f"{size} bytes, manifest says"
        raise CheckpointCorrupt(checkpoint_id, f"file {entry.path} has {more} {entry.size_bytes}")
    starts = list(itertools.accumulate(segments, initial=0))
    digests: list[bytes] = [b""] * len(segments)
    taken = itertools.count()  # next() on it is atomic under the interpreter lock
    failed = threading.Event()

    def work() -> None:
        try:
            while not failed.is_set():
                index = next(taken)
                if index >= len(segments):
                    return
                start, length = starts[index], segments[index]
                digests[index] = _segment(
                    fd, entry, start, length, chunks.get((start, length), []), checkpoint_id
                )
        except BaseException:
            failed.set()  # the others stop at their next segment; the first error is raised
            raise

    # A larger read-ahead window. Asking for the pages ahead (WILLNEED) did not help: the kernel
    # then does the page-cache work on the asking thread, and a cold restore took more CPU.
    _advise(fd, 0, 0, "POSIX_FADV_SEQUENTIAL")
    futures = [pool.submit(work) for _ in range(max(1, min(workers, len(segments))))]
    errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
    if errors:
        raise errors[0]
    return digests


def _advise(fd: int, offset: int, length: int, advice: str) -> None:
    """A read-ahead hint where the platform has one; it changes no byte that is read."""
    if hasattr(os, "posix_fadvise") and hasattr(os, advice):
        with suppress(OSError):
            os.posix_fadvise(fd, offset, length, getattr(os, advice))


def _segment(
    fd: int,
    entry: FileEntry,
    start: int,
    length: int,
    targets: list[tuple[ChunkRef, memoryview]],
    checkpoint_id: str,
) -> bytes:
    """Read one segment into its destination (a raw chunk) or scratch, hashing as it comes; decode
    it into every destination that wants it; return its digest."""
    raw = bool(targets) and targets[0][0].codec is Codec.RAW
    buffer = targets[0][1] if raw else _scratch_buffer(length)
    hasher = segment_hasher(entry.digest)
    done = 0
    while done < length:
        piece = buffer[done : done + SUB_READ_BYTES]
        got = os.preadv(fd, [piece], start + done)
        if got <= 0:  # shrunk since it was measured
            raise CheckpointCorrupt(
                checkpoint_id,
                f"file {entry.path} has {start + done} bytes, manifest says {entry.size_bytes}",
            )
        hasher.update(piece[:got])
        done += got
    if targets and raw:
        for _, view in targets[1:]:  # the first destination is ``buffer`` itself
            if len(view):
                view[:] = buffer
    elif targets:
        decompress_into(buffer, targets[0][0], targets, checkpoint_id)
    return bytes(hasher.digest())


def decompress_into(
    stored: Any, ref: ChunkRef, targets: list[tuple[ChunkRef, memoryview]], checkpoint_id: str
) -> None:
    """Decompress one stored chunk into every destination that wants it; corrupt data raises."""
    try:
        raw = zstandard.ZstdDecompressor().decompress(stored, max_output_size=ref.raw_bytes)
    except zstandard.ZstdError as exc:
        raise CheckpointCorrupt(
            checkpoint_id, f"chunk at {ref.file}:{ref.offset} does not decompress ({exc})"
        ) from None
    if len(raw) != ref.raw_bytes:
        raise CheckpointCorrupt(
            checkpoint_id, f"chunk at {ref.file}:{ref.offset} decodes to the wrong size"
        )
    for _, view in targets:
        view[:] = raw
