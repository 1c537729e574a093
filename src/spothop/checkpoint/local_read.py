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

A file that is mostly not in the page cache (a restart on a fresh instance) is read, where the
destination allows it, with a second descriptor opened ``O_DIRECT``: the disk then writes straight
into the destination, and the kernel neither fills the page cache nor copies out of it. A cold
restore of 256 MiB (medians of two alternating runs of 8 and 10, load 10-11 on 2 cores):
0.062-0.063 s of CPU against 0.089-0.105 s through the page cache, 0.175-0.187 s against
0.248-0.347 s of wall time; 4 MiB direct reads beat 1 MiB ones (0.175-0.194 s) in both runs. A
direct read needs the file offset, the destination's address and the length to be multiples of
``DIRECT_ALIGN``: the reader lays out leaf buffers so that a raw chunk's destination sits at the
same place within a page as its bytes in the file (:func:`page_phase`), reads the unaligned head
and tail of a segment through the page cache, and falls back to the page cache for a whole file
whose file system refuses ``O_DIRECT``. A file that is mostly cached is read from the cache.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import numpy as np
import zstandard

from spothop.checkpoint.bulk import KeptPool
from spothop.checkpoint.errors import CheckpointCorrupt
from spothop.checkpoint.manifest import ChunkRef, Codec, FileEntry, segment_hasher

# Read and hashed in pieces of this size: the piece is still in the core's cache (L2 here is
# 2 MiB a core) when it is hashed. 256 MiB read and hashed on one core: 0.127 s CPU in 1 MiB pieces,
# 0.139-0.150 s reading a whole 4 MiB segment (or a 16 MiB batch) first.
SUB_READ_BYTES = 1024 * 1024
Targets = Mapping[tuple[int, int], list[tuple[ChunkRef, memoryview]]]
# O_DIRECT's alignment: file offset, memory address and length. A page is a multiple of every
# logical block size a local disk has (512 or 4096 bytes).
DIRECT_ALIGN = 4096
# Read at once by a direct read: its bytes are in no cache either way (the disk writes them to
# memory), so a larger request costs nothing in the hash and keeps the disk busier.
DIRECT_READ_BYTES = 4 * 1024 * 1024
# A file with at least this share of its pages in the page cache is read from the cache.
DIRECT_MAX_RESIDENT = 0.5

_scratch = threading.local()
_pool = KeptPool("spothop-ckpt-read")


def read_pool(workers: int) -> ThreadPoolExecutor:
    """The readers' threads, started once and kept: starting and joining them on every restore
    cost 3-6 ms of a 60 ms restore of 256 MiB (more while the cores are busy). The workers never
    wait on one another, so restores in several threads at once share it without deadlock."""
    return _pool.get(workers)


def address(view: Any) -> int:
    """The memory address of a buffer's first byte."""
    return int(np.frombuffer(view, dtype=np.uint8).ctypes.data)


def page_phase(offset: int) -> int:
    """Where within a page a destination must start for a direct read of bytes at ``offset``."""
    return offset % DIRECT_ALIGN


def _scratch_buffer(length: int, phase: int = 0) -> memoryview:
    """A per-thread buffer of ``length`` bytes starting ``phase`` bytes into a page, reused across
    segments: faulting fresh pages for bytes that are only hashed (or decompressed elsewhere) would
    cost as much as reading them."""
    buffer: np.ndarray[Any, np.dtype[np.uint8]] | None = getattr(_scratch, "buffer", None)
    if buffer is None or len(buffer) < length + 2 * DIRECT_ALIGN:
        buffer = _scratch.buffer = np.empty(length + 2 * DIRECT_ALIGN, dtype=np.uint8)
    skip = (phase - int(buffer.ctypes.data)) % DIRECT_ALIGN
    return memoryview(buffer.data)[skip : skip + length]


# File systems on a local block device (statfs magic numbers: ext2-4, XFS, Btrfs, F2FS, and
# overlayfs, a container's root over one of them). On a network file system (NFS, Lustre) the
# page cache's read-ahead is what keeps requests in flight, so such files are read through it.
_LOCAL_DISKS = frozenset({0xEF53, 0x58465342, 0x9123683E, 0xF2F52010, 0x794C7630})


def _load_libc() -> tuple[Any, Any, Any, Any] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mmap_, munmap, mincore, fstatfs = libc.mmap, libc.munmap, libc.mincore, libc.fstatfs
    except (OSError, AttributeError, TypeError):
        return None
    fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
    fstatfs.restype = ctypes.c_int
    mmap_.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    mmap_.restype = ctypes.c_void_p
    munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    munmap.restype = ctypes.c_int
    mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    mincore.restype = ctypes.c_int
    return mmap_, munmap, mincore, fstatfs


_libc = _load_libc() if hasattr(os, "O_DIRECT") else None


def resident_fraction(fd: int, size: int) -> float | None:
    """The share of the file's pages in the page cache (``mincore`` on a mapping that is never
    touched), or None where that cannot be known."""
    if _libc is None or size <= 0:
        return None
    mmap_, munmap, mincore, _ = _libc
    at = mmap_(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if at is None or at == ctypes.c_void_p(-1).value:
        return None
    try:
        pages = -(-size // mmap.PAGESIZE)
        vector = (ctypes.c_ubyte * pages)()
        if mincore(at, size, vector) != 0:
            return None
        flags = np.frombuffer(bytes(vector), dtype=np.uint8)
        return int(np.count_nonzero(flags & 1)) / pages  # bit 0 of each byte: resident
    finally:
        munmap(at, size)


def on_local_disk(fd: int) -> bool:
    """Whether the open file is on a local block device's file system (``_LOCAL_DISKS``)."""
    if _libc is None:
        return False
    info = ctypes.create_string_buffer(512)  # struct statfs: 120 bytes on 64-bit Linux
    if _libc[3](fd, info) != 0:
        return False
    kind = int.from_bytes(info.raw[: ctypes.sizeof(ctypes.c_long)], sys.byteorder)  # f_type
    return (kind & 0xFFFFFFFF) in _LOCAL_DISKS


def open_direct(path: str, fd: int, size: int) -> int | None:
    """A second descriptor on ``path`` that bypasses the page cache, where the file is mostly not in
    it, sits on a local disk, and the platform and file system allow ``O_DIRECT``; None otherwise
    (read from the cache)."""
    if not on_local_disk(fd):
        return None
    resident = resident_fraction(fd, size)
    if resident is None or resident >= DIRECT_MAX_RESIDENT:
        return None
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError:  # a file system without O_DIRECT (tmpfs), or the file is gone
        return None


def read_segments(
    fd: int,
    entry: FileEntry,
    segments: tuple[int, ...],
    chunks: Targets,
    checkpoint_id: str,
    pool: ThreadPoolExecutor,
    workers: int,
    path: str | None = None,
) -> list[bytes]:
    """Every segment's raw digest, in order, each read once (see the module's contract); ``path``
    (the file's) lets a file that is mostly not cached be read directly."""
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
                    fd, entry, start, length, chunks.get((start, length), []), checkpoint_id, direct
                )
        except BaseException:
            failed.set()  # the others stop at their next segment; the first error is raised
            raise
        finally:
            _scratch.__dict__.pop("buffer", None)  # the pool's threads outlive this read

    # A larger read-ahead window. Asking for the pages ahead (WILLNEED) did not help: the kernel
    # then does the page-cache work on the asking thread, and a cold restore took more CPU.
    _advise(fd, 0, 0, "POSIX_FADV_SEQUENTIAL")
    direct = _DirectReads(open_direct(path, fd, size)) if path is not None else None
    try:
        futures = [pool.submit(work) for _ in range(max(1, min(workers, len(segments))))]
        errors = [exc for exc in (f.exception() for f in futures) if exc is not None]
    finally:
        if direct is not None:
            direct.close()
    if errors:
        raise errors[0]
    return digests


class _DirectReads:
    """The file's ``O_DIRECT`` descriptor, shared by the workers, or none; the first read the
    kernel refuses (EINVAL: an alignment this disk does not take) turns it off for the file."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self._opened = fd

    def read(self, piece: memoryview, offset: int) -> int | None:
        """Bytes read into ``piece`` from ``offset``, or None: read it through the page cache."""
        fd = self.fd
        if fd is None:
            return None
        try:
            return os.preadv(fd, [piece], offset)
        except OSError:
            self.fd = None
            return None

    def close(self) -> None:
        if self._opened is not None:
            os.close(self._opened)
            self._opened = self.fd = None


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
    direct: _DirectReads | None = None,
) -> bytes:
    """Read one segment into its destination (a raw chunk) or scratch, hashing as it comes; decode
    it into every destination that wants it; return its digest. With ``direct``, the whole pages
    of the segment are read with it when the destination sits at the file offset's page phase."""
    raw = bool(targets) and targets[0][0].codec is Codec.RAW
    buffer = targets[0][1] if raw else _scratch_buffer(length, page_phase(start))
    hasher = segment_hasher(entry.digest)
    if direct is not None and (direct.fd is None or page_phase(address(buffer) - start)):
        direct = None
    done = 0
    while done < length:
        at, want = start + done, min(SUB_READ_BYTES, length - done)
        got = None
        if direct is not None:
            if page_phase(at):  # the head, up to the first page boundary: through the cache
                want = min(want, DIRECT_ALIGN - page_phase(at))
            elif length - done >= DIRECT_ALIGN:  # whole pages (a short tail goes through the cache)
                want = min(DIRECT_READ_BYTES, length - done)
                want -= page_phase(want)
                got = direct.read(buffer[done : done + want], at)
        piece = buffer[done : done + want]
        if got is None:
            got = os.preadv(fd, [piece], at)
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
