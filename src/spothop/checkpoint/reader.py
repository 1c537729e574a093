"""Reading checkpoints back: manifests, delta chains, and verified, streamed leaf data.

Contract: nothing is returned until every byte it came from has been checked.
Each pack file a checkpoint needs (its own and, for a delta, its ancestors')
is read once and hashed (XXH3-128 in format 4, BLAKE3 in 3, sha256 before);
chunks are decoded into their destinations on the way, and the result is
handed out only if every file's size and digest match its manifest. A local
file of format 2 or later is read by every worker at once, each reading and hashing its own
segments (:mod:`spothop.checkpoint.local_read`); any other file object is read
segment by segment on one thread (straight into the destination for a raw
chunk) while a thread pool hashes and decompresses the segments, bounded to a
few in flight (the hashes and zstd release the GIL); format-1 files are read
whole through one sha256. Any mismatch raises :class:`CheckpointCorrupt`; a
broken chain raises :class:`ParentMissing`.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Any

import numpy as np

from spothop.checkpoint.errors import CheckpointCorrupt, CheckpointError, ParentMissing
from spothop.checkpoint.local_read import (
    DIRECT_ALIGN,
    decompress_into,
    page_phase,
    read_pool,
    read_segments,
)
from spothop.checkpoint.manifest import (
    MANIFEST_NAME,
    ChunkRef,
    Codec,
    Digest,
    FileEntry,
    Manifest,
    file_root,
    manifest_from_json,
    segment_digest,
)
from spothop.checkpoint.store import Store

log = logging.getLogger("spothop.checkpoint")
READ_BLOCK_BYTES = 8 * 1024 * 1024  # for hashing the bytes between and after chunks (format 1)
MAX_READ_WORKERS = 8  # verify/decompress threads; the read itself stays one sequential stream
INFLIGHT_SEGMENTS_PER_WORKER = 2  # keeps every worker busy; bounds scratch memory to a few chunks
READ_BATCH_BYTES = 16 * 1024 * 1024  # read at once by the one-reader path, then verified
READ_BATCH_SEGMENTS = 64  # and at most this many segments per read
MAX_IOVECS = 1024  # IOV_MAX on Linux: buffers one preadv may fill

# Leaves smaller than this are read into shared blocks of this size (see :func:`_leaf_buffers`),
# each starting at a multiple of LEAF_ALIGN_BYTES (a cache line; any dtype's alignment divides it).
ARENA_BYTES = 64 * 1024 * 1024
LEAF_ALIGN_BYTES = 64
# Leaves from this size on are laid out for direct reads (up to a page of padding each).
DIRECT_MIN_LEAF_BYTES = 256 * 1024

Targets = Mapping[tuple[int, int], list[tuple[ChunkRef, memoryview]]]
LeafBytes = np.ndarray[Any, np.dtype[np.uint8]]  # one leaf's raw bytes, as read back


def _uninitialised(size: int, phase: int | None = None) -> LeafBytes:
    """``size`` bytes, not zeroed; with ``phase``, starting that many bytes into a page."""
    if phase is None:
        return np.empty(size, dtype=np.uint8)
    block = np.empty(size + DIRECT_ALIGN, dtype=np.uint8)
    skip = (phase - int(block.ctypes.data)) % DIRECT_ALIGN
    return block[skip : skip + size]


def _leaf_buffers(
    sizes: Mapping[str, int], phases: Mapping[str, int] | None = None
) -> dict[str, LeafBytes]:
    """Uninitialised buffers for the leaves, in order: every byte is then read or decoded into them.

    Zero-filling them first (``bytearray(n)``) took as long as the read itself here. Leaves under
    ``ARENA_BYTES`` are cut from shared blocks of that size rather than allocated one by one: a
    block is one large mapping the kernel can back with huge pages, while thousands of small ones
    are faulted in 4 KiB at a time (a warm 256 MiB restore of 4 MiB tensors: 0.142 s → 0.107 s).
    The price: a leaf kept alive keeps its block (at most ``ARENA_BYTES``) alive. A leaf with a
    phase in ``phases`` starts that many bytes into a page (so that a direct read can fill it:
    :mod:`spothop.checkpoint.local_read`), at the cost of up to a page of padding."""
    phases = phases or {}
    out: dict[str, LeafBytes] = {}
    block, used, base = _uninitialised(0), 0, 0
    for key, size in sizes.items():
        phase = phases.get(key)
        if size >= ARENA_BYTES:
            out[key] = _uninitialised(size, phase)
            continue
        used = -(-used // LEAF_ALIGN_BYTES) * LEAF_ALIGN_BYTES
        if phase is not None:
            used += (phase - base - used) % DIRECT_ALIGN
        if used + size > len(block):
            block = _uninitialised(ARENA_BYTES)
            base, used = int(block.ctypes.data), 0
            if phase is not None:
                used = (phase - base) % DIRECT_ALIGN
        out[key], used = block[used : used + size], used + size
    return out


def _phases(manifest: Manifest) -> dict[str, int]:
    """The page phase of each leaf whose first chunk is stored raw and large enough to be worth a
    direct read: the leaf's buffer then lines up with its bytes in the file."""
    phases = {
        key: page_phase(leaf.chunks[0].offset)
        for key, leaf in manifest.leaves.items()
        if leaf.chunks
        and leaf.chunks[0].codec is Codec.RAW
        and leaf.raw_bytes >= DIRECT_MIN_LEAF_BYTES
    }
    # A phase off the usual alignment would misalign the leaf's dtype: such a leaf is read cached.
    return {key: phase for key, phase in phases.items() if phase % LEAF_ALIGN_BYTES == 0}


def _read_pool() -> ThreadPoolExecutor:
    return read_pool(_read_workers())


def _read_workers() -> int:
    return min(MAX_READ_WORKERS, os.cpu_count() or 1)


def manifest_path(checkpoint_id: str) -> str:
    return f"{checkpoint_id}/{MANIFEST_NAME}"


# Parsed manifests by (store URL, checkpoint id) while a restore runs (:func:`manifests_parsed_once`).
_parsed: ContextVar[dict[tuple[str, str], Manifest] | None] = ContextVar(
    "spothop_parsed_manifests", default=None
)


@contextmanager
def manifests_parsed_once() -> Iterator[None]:
    """Within the block, each manifest is read and parsed once (on this thread's context).

    One restore looks at the same manifests several times (other world sizes, this world's
    candidates, each delta's parents): seven parses of 1-2 ms each for a delta chain, a tenth of
    a 256 MiB restore. Committed manifests never change, so a parse stays good for the block;
    a damaged one is not kept (it fails again, with its reason, wherever it is read). Nothing is
    kept across blocks: each restore reads what is on the disk now."""
    token = _parsed.set({})
    try:
        yield
    finally:
        _parsed.reset(token)


def load_manifest(store: Store, checkpoint_id: str) -> Manifest:
    """The committed manifest of ``checkpoint_id``; raises :class:`CheckpointCorrupt` if absent or damaged."""
    parsed = _parsed.get()
    key = (store.url, checkpoint_id)
    if parsed is not None and key in parsed:
        return parsed[key]
    manifest = _load_manifest(store, checkpoint_id)
    if parsed is not None:
        parsed[key] = manifest
    return manifest


def _load_manifest(store: Store, checkpoint_id: str) -> Manifest:
    try:
        text = store.read(manifest_path(checkpoint_id))
    except FileNotFoundError:
        raise CheckpointCorrupt(checkpoint_id, "no manifest (the save never committed)") from None
    except OSError as exc:  # a folder where the manifest should be, or one that cannot be read
        raise CheckpointCorrupt(checkpoint_id, f"manifest cannot be read ({_why(exc)})") from None
    manifest = manifest_from_json(text, checkpoint_id)
    if manifest.checkpoint_id != checkpoint_id:
        raise CheckpointCorrupt(
            checkpoint_id, f"manifest names another checkpoint ({manifest.checkpoint_id})"
        )
    return manifest


def committed(store: Store) -> tuple[list[Manifest], list[tuple[str, str]]]:
    """Every committed checkpoint, oldest first, and ``(id, reason)`` for damaged manifests.

    Folders without a manifest are neither: they are saves that never committed.
    """
    found: list[Manifest] = []
    skipped: list[tuple[str, str]] = []
    for name in store.list_dirs():
        if not _exists(store, manifest_path(name)):
            continue
        try:
            found.append(load_manifest(store, name))
        except CheckpointError as exc:
            skipped.append((name, getattr(exc, "reason", str(exc))))
            log.warning("skipping checkpoint %s in %s: %s", name, store.url, exc)
    found.sort(key=lambda m: (m.step, m.wall_time_unix_s))
    return found, skipped


def ancestors(store: Store, manifest: Manifest) -> list[Manifest]:
    """The parents of a delta, nearest first; raises :class:`ParentMissing` if one cannot be loaded."""
    chain: list[Manifest] = []
    seen = {manifest.checkpoint_id}
    current = manifest
    while current.parent is not None:
        if current.parent in seen:
            raise ParentMissing(manifest.checkpoint_id, f"delta chain loops at {current.parent}")
        try:
            parent = load_manifest(store, current.parent)
        except CheckpointError as exc:
            raise ParentMissing(
                manifest.checkpoint_id, f"parent {current.parent} is unusable: {exc}"
            ) from None
        chain.append(parent)
        seen.add(parent.checkpoint_id)
        current = parent
    return chain


def _needed_files(manifest: Manifest, chain: Sequence[Manifest]) -> dict[str, FileEntry]:
    listed = {f.path: f for m in (manifest, *chain) for f in m.files}
    needed = {f.path: f for f in manifest.files}
    for leaf in manifest.leaves.values():
        for ref in leaf.chunks:
            if ref.file not in listed:
                raise ParentMissing(
                    manifest.checkpoint_id, f"chunk file {ref.file} is in no manifest of its chain"
                )
            needed[ref.file] = listed[ref.file]
    return needed


def read_leaves(
    store: Store, manifest: Manifest, chain: Sequence[Manifest]
) -> dict[str, LeafBytes]:
    """Every leaf's raw bytes (:func:`_leaf_buffers`), after verifying every file they (and the
    manifest) depend on."""
    buffers = _leaf_buffers(
        {key: leaf.raw_bytes for key, leaf in manifest.leaves.items()},
        _phases(manifest) if store.is_local else None,
    )
    # Keyed by (offset, stored size): an empty chunk and the next chunk share an offset.
    targets: dict[str, dict[tuple[int, int], list[tuple[ChunkRef, memoryview]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for key, leaf in manifest.leaves.items():
        view, position = memoryview(buffers[key].data), 0
        for ref in leaf.chunks:
            targets[ref.file][ref.offset, ref.stored_bytes].append(
                (ref, view[position : position + ref.raw_bytes])
            )
            position += ref.raw_bytes
    pool = _read_pool()
    for entry in _needed_files(manifest, chain).values():
        owner = entry.path.split("/", 1)[0]
        if owner != manifest.checkpoint_id and not _exists(store, entry.path):
            raise ParentMissing(manifest.checkpoint_id, f"parent file {entry.path} is missing")
        _stream_file(store, entry, targets.get(entry.path, {}), manifest.checkpoint_id, pool)
    return buffers


def verify(store: Store, manifest: Manifest) -> None:
    """Check the whole chain of ``manifest`` without keeping any data; raises on the first problem."""
    chain = ancestors(store, manifest)
    pool = _read_pool()
    for entry in _needed_files(manifest, chain).values():
        _stream_file(store, entry, {}, manifest.checkpoint_id, pool)


def check_files(store: Store, manifest: Manifest) -> None:
    """The quick check: every manifest of the chain loads and every file it needs is there at its size.

    One metadata call per file, no data read: it finds a missing or truncated file or a deleted
    parent manifest, not a flipped bit (:func:`verify` does). Raises :class:`CheckpointCorrupt`."""
    chain = ancestors(store, manifest)
    for entry in _needed_files(manifest, chain).values():
        with _file_errors(manifest.checkpoint_id, entry.path):
            info = store.fs.info(store.path(entry.path))
        if info.get("type") != "file":
            kind = "folder" if info.get("type") == "directory" else str(info.get("type"))
            raise CheckpointCorrupt(manifest.checkpoint_id, f"{entry.path} is a {kind}, not a file")
        if info.get("size") != entry.size_bytes:
            raise CheckpointCorrupt(
                manifest.checkpoint_id,
                f"file {entry.path} has {info.get('size')} bytes, manifest says {entry.size_bytes}",
            )


@contextmanager
def _file_errors(checkpoint_id: str, path: str) -> Iterator[None]:
    """A pack file that is missing, a folder, or unreadable makes its checkpoint corrupt, not a crash."""
    try:
        yield
    except FileNotFoundError:
        raise CheckpointCorrupt(checkpoint_id, f"file {path} is missing") from None
    except OSError as exc:
        raise CheckpointCorrupt(
            checkpoint_id, f"file {path} cannot be read ({_why(exc)})"
        ) from None


def _why(exc: OSError) -> str:
    if isinstance(exc, IsADirectoryError):
        return "it is a folder, not a file"
    return exc.strerror or str(exc) or type(exc).__name__


def _exists(store: Store, path: str) -> bool:
    try:
        return store.exists(path)
    except OSError:
        return False


def _stream_file(
    store: Store, entry: FileEntry, chunks: Targets, checkpoint_id: str, pool: ThreadPoolExecutor
) -> None:
    if not entry.digest.available:
        raise CheckpointCorrupt(
            checkpoint_id,
            f"file {entry.path} is hashed with {entry.digest}, which this Python cannot compute "
            f"(pip install {entry.digest.package})",
        )
    with _file_errors(checkpoint_id, entry.path):
        if entry.segments is None:
            _stream_whole_file(store, entry, chunks, checkpoint_id)
        else:
            _stream_segments(store, entry, entry.segments, chunks, checkpoint_id, pool)


def _stream_segments(
    store: Store,
    entry: FileEntry,
    segments: tuple[int, ...],
    chunks: Targets,
    checkpoint_id: str,
    pool: ThreadPoolExecutor,
) -> None:
    """Format 2: verify the file's Merkle root, decoding the chunks in ``chunks`` on the way."""
    _check_chunks_are_segments(entry, segments, chunks, checkpoint_id)
    if store.is_local and hasattr(os, "preadv"):
        with store.open_read(entry.path) as handle:
            fd = _descriptor(handle)
            if fd is not None:  # every core reads and hashes (:mod:`local_read`)
                digests = read_segments(
                    fd,
                    entry,
                    segments,
                    chunks,
                    checkpoint_id,
                    pool,
                    _read_workers(),
                    store.path(entry.path),
                )
                _check_root(entry, digests, checkpoint_id)
                return
    _stream_sequential(store, entry, segments, chunks, checkpoint_id, pool)


def _check_root(entry: FileEntry, digests: list[bytes], checkpoint_id: str) -> None:
    if file_root(digests, entry.digest) != entry.sha256:
        raise CheckpointCorrupt(checkpoint_id, f"file {entry.path} fails its {entry.digest} check")


def _stream_sequential(
    store: Store,
    entry: FileEntry,
    segments: tuple[int, ...],
    chunks: Targets,
    checkpoint_id: str,
    pool: ThreadPoolExecutor,
) -> None:
    """Any file object: one thread reads the segments in order while the pool verifies them."""
    digests: list[bytes] = []
    pending: deque[Future[bytes]] = deque()
    limit = _read_workers() * INFLIGHT_SEGMENTS_PER_WORKER
    try:
        with store.open_read(entry.path) as handle:
            reader = _SegmentReader(handle, store.is_local)
            offset = 0
            for batch in _batches(segments):
                buffers: list[tuple[memoryview, list[tuple[ChunkRef, memoryview]]]] = []
                position = offset
                for length in batch:
                    targets = chunks.get((position, length), [])
                    position += length
                    raw_target = bool(targets) and targets[0][0].codec is Codec.RAW
                    # A raw chunk is read straight into its destination: no scratch copy.
                    buffer = (
                        targets[0][1] if raw_target else memoryview(_uninitialised(length).data)
                    )
                    buffers.append((buffer, targets))
                want = sum(batch)
                got = reader.read([buffer for buffer, _ in buffers], offset)
                if got != want:
                    raise CheckpointCorrupt(
                        checkpoint_id,
                        f"file {entry.path} has {offset + got} bytes, "
                        f"manifest says {entry.size_bytes}",
                    )
                for buffer, targets in buffers:
                    pending.append(
                        pool.submit(_check_segment, entry.digest, buffer, targets, checkpoint_id)
                    )
                while len(pending) > limit:
                    digests.append(pending.popleft().result())
                offset += want
            if reader.more(offset):
                raise CheckpointCorrupt(
                    checkpoint_id,
                    f"file {entry.path} has more bytes than the "
                    f"{entry.size_bytes} its manifest says",
                )
            while pending:
                digests.append(pending.popleft().result())
    finally:
        # After a failure: drop what has not started, and let what has end before returning (the
        # pool outlives this call, so nothing else would wait for it).
        running = [future for future in pending if not future.cancel()]
        futures_wait(running)
    _check_root(entry, digests, checkpoint_id)


def _batches(segments: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Consecutive segments, grouped into reads of about ``READ_BATCH_BYTES`` (one segment at least)."""
    start = size = 0
    for index, length in enumerate(segments):
        if index > start and (
            size + length > READ_BATCH_BYTES or index - start >= READ_BATCH_SEGMENTS
        ):
            yield segments[start:index]
            start, size = index, 0
        size += length
    if start < len(segments):
        yield segments[start:]


def _descriptor(handle: Any) -> int | None:
    """The descriptor behind an open local file, or None where the object has none."""
    try:
        fd: int = handle.fileno()
    except (OSError, AttributeError, ValueError):
        return None
    return fd


class _SegmentReader:
    """Reads consecutive segments of one pack file into their buffers.

    A local file takes one ``preadv`` per batch (one system call filling many destinations): a
    read thread that also hands segments to the pool and waits for the interpreter lock between
    4 MiB reads left the disk idle between them, where a plain read's single large call keeps
    the kernel's readahead going. Any other file object is read with ``readinto``, in order."""

    def __init__(self, handle: Any, local: bool) -> None:
        self._handle = handle  # every fsspec file object has readinto; IO[bytes] does not say so
        self._fd: int | None = None
        if local and hasattr(os, "preadv"):
            try:
                self._fd = handle.fileno()
            except (OSError, AttributeError, ValueError):  # no descriptor behind this object
                self._fd = None

    def read(self, buffers: list[memoryview], offset: int) -> int:
        """Fill ``buffers`` from ``offset`` on; returns the bytes read (fewer only at the end)."""
        if self._fd is None:
            total = 0
            for buffer in buffers:
                got = self._handle.readinto(buffer) if len(buffer) else 0
                total += got
                if got < len(buffer):
                    break
            return total
        total, rest = 0, [b for b in buffers if len(b)]
        while rest:
            got = os.preadv(self._fd, rest[:MAX_IOVECS], offset + total)
            if got == 0:
                break
            total += got
            while rest and got >= len(rest[0]):  # drop what is full, trim a part-filled one
                got -= len(rest[0])
                rest.pop(0)
            if rest and got:
                rest[0] = rest[0][got:]
        return total

    def more(self, end: int) -> bool:
        """Whether the file goes on past ``end``."""
        if self._fd is None:
            return bool(self._handle.read(1))
        return bool(os.pread(self._fd, 1, end))


def _check_chunks_are_segments(
    entry: FileEntry, segments: tuple[int, ...], chunks: Targets, checkpoint_id: str
) -> None:
    starts: dict[int, int] = {}
    offset = 0
    for length in segments:
        starts[offset] = length
        offset += length
    for (start, stored), targets in chunks.items():
        ref = targets[0][0]
        if stored and starts.get(start) != stored:
            raise CheckpointCorrupt(
                checkpoint_id, f"chunk at {entry.path}:{start} is not one of the file's segments"
            )
        if ref.codec is Codec.RAW and ref.raw_bytes != stored:
            raise CheckpointCorrupt(
                checkpoint_id, f"raw chunk at {entry.path}:{start} has two sizes"
            )


def _check_segment(
    kind: Digest,
    stored: memoryview,
    targets: list[tuple[ChunkRef, memoryview]],
    checkpoint_id: str,
) -> bytes:
    """Hash one stored segment and decode it into its destinations; returns its digest."""
    digest = segment_digest(kind, stored)
    if not targets:
        return digest
    ref = targets[0][0]
    if ref.codec is Codec.RAW:
        for _, view in targets[1:]:  # the first destination is ``stored`` itself
            if len(view):
                view[:] = stored
        return digest
    decompress_into(stored, ref, targets, checkpoint_id)
    return digest


def _stream_whole_file(store: Store, entry: FileEntry, chunks: Targets, checkpoint_id: str) -> None:
    """Format 1: one sha256 over the whole file, read and decoded on this thread."""
    hasher = hashlib.sha256()
    with store.open_read(entry.path) as handle:
        position = 0
        for offset, stored in sorted(chunks):
            position += _hash_span(handle, hasher, offset - position)
            if position != offset:
                break  # truncated: the size check below reports it
            position += _read_chunk(handle, hasher, chunks[offset, stored], checkpoint_id)
        position += _hash_span(handle, hasher, None)
    if position != entry.size_bytes:
        raise CheckpointCorrupt(
            checkpoint_id,
            f"file {entry.path} has {position} bytes, manifest says {entry.size_bytes}",
        )
    if hasher.hexdigest() != entry.sha256:
        raise CheckpointCorrupt(checkpoint_id, f"file {entry.path} fails its sha256 check")


def _hash_span(handle: IO[bytes], hasher: Any, length: int | None) -> int:
    """Hash ``length`` bytes (None: to the end); returns how many there were."""
    total = 0
    while length is None or total < length:
        want = READ_BLOCK_BYTES if length is None else min(READ_BLOCK_BYTES, length - total)
        block = handle.read(want)
        if not block:
            break
        hasher.update(block)
        total += len(block)
    return total


def _read_chunk(
    handle: IO[bytes], hasher: Any, targets: list[tuple[ChunkRef, memoryview]], checkpoint_id: str
) -> int:
    ref = targets[0][0]
    if ref.codec is Codec.RAW:
        first = targets[0][1]
        reader: Any = handle  # every fsspec file object has readinto; IO[bytes] does not say so
        got = reader.readinto(first) if ref.stored_bytes else 0
        hasher.update(first[:got])
        if got != ref.stored_bytes:
            return got
        for _, view in targets[1:]:
            if len(view):  # empty leaves share offsets; there is nothing to copy
                view[:] = first
        return got
    stored = handle.read(ref.stored_bytes)
    hasher.update(stored)
    if len(stored) == ref.stored_bytes:
        decompress_into(stored, ref, targets, checkpoint_id)
    return len(stored)
