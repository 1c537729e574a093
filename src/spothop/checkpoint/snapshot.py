"""The blocking part of a save: copying the state to host memory.

This is the only part of a save the training loop waits for. Afterwards the
host copy belongs to the checkpointer, and training may change the live
tensors at once. For an emergency delta with version tracking on, torch
tensors whose autograd version counter has not moved since the base
checkpoint are not copied at all: they are known to be unchanged, which is
what makes an emergency save of a mostly-frozen model (LoRA) take
milliseconds rather than seconds.

Host buffers are kept between saves (:class:`HostBuffers`): each tensor is
``copy_``-ed into its old buffer (pinned for device tensors) instead of a
fresh allocation, which would pay page faults on every save (memcpy into
warm pages runs ~4x faster than a ``clone`` here). With ``skip_unchanged``
a tensor unchanged since the previous save (same storage, same version)
shares the host copy it already has, so a steady-state save stalls for the
copy of the changed state only. That is opt-in because version counters
miss some writes: ``tensor.data`` writes and fused optimizers
(``torch.optim.AdamW(fused=True)``, the Hugging Face Trainer's default)
update parameters without bumping them. This is safe because a
buffer is only rewritten here, and a snapshot is taken only once the
previous save has finished with its buffers (one save in flight at most).
The price is one host copy of the state kept resident between saves.

That resident copy also makes emergency deltas cheap and exact without
trusting version counters. Each buffer remembers which checkpoint's stored
bytes it holds (``saved_as``: the local or durable save that last filled all
of it) and which chunks an emergency delta has overwritten since (``dirty``).
When an emergency delta's base is that checkpoint, each chunk of the live
state is compared byte for byte with the buffer (``memcmp`` on every core, in
one batch over all leaves, see :mod:`bulk`; on the device for device tensors): an equal
chunk *is* the base's chunk, so its manifest entry is reused with no hashing
and no copy; only differing (or dirty) chunks are copied into the buffer and
hashed by the writer. Any doubt (no buffer, a later local save refilled it, a
new process, another dtype, shape or chunk layout, a non-contiguous tensor)
falls back to copying everything and letting content hashes decide.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spothop.checkpoint import bulk, tree
from spothop.checkpoint.manifest import ChunkRef, LeafEntry, Manifest
from spothop.checkpoint.pack import DEFAULT_CHUNK_BYTES, Bytes, HostLeaf


@dataclass(frozen=True)
class DeltaBase:
    """The checkpoint deltas are taken against, and the tensor sources (``_torch_arrays.Source``) it was copied at."""

    manifest: Manifest
    version_keys: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class _Held:
    host: Any  # the host copy: a CPU torch tensor (pinned for device tensors) or a NumPy array
    source: Any = None  # the torch ``Source`` it was copied from; None: NumPy, always copied again
    # The checkpoint whose stored bytes ``host`` holds (the full save that last filled it; None:
    # none), and the chunks emergency deltas have overwritten since, which no longer hold them.
    saved_as: str | None = None
    dirty: set[int] = field(default_factory=set)


class HostBuffers:
    """Host copies kept from one save to the next, by leaf path. Used by one save at a time."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def get(self, key: str) -> _Held | None:
        return self._held.get(key)

    def put(
        self,
        key: str,
        host: Any,
        source: Any = None,
        saved_as: str | None = None,
        dirty: set[int] | None = None,
    ) -> None:
        self._held[key] = _Held(host, source, saved_as, dirty if dirty is not None else set())

    def keep_only(self, keys: Mapping[str, Any]) -> None:
        """Drop buffers of leaves the state no longer has."""
        self._held = {k: v for k, v in self._held.items() if k in keys}

    def clear(self) -> None:
        self._held.clear()


def unprepared(state: Any, buffers: HostBuffers) -> list[tuple[str, Any]]:
    """The array leaves of ``state`` (by leaf path) that have no kept buffer fitting them yet."""
    return [
        (key, value)
        for key, value in tree.flatten(state).arrays.items()
        if not _fits(buffers.get(key), value)
    ]


def _fits(old: _Held | None, value: Any) -> bool:
    """Whether the kept buffer ``old`` can take a copy of ``value``: same kind of array, dtype and shape."""
    if old is None:
        return False
    if isinstance(value, np.ndarray):
        return (
            isinstance(old.host, np.ndarray)
            and old.host.dtype == value.dtype
            and old.host.shape == value.shape
        )
    from spothop.checkpoint import _torch_arrays as ta

    return bool(ta.fits(old.host, value))


def allocate(leaves: list[tuple[str, Any]], buffers: HostBuffers) -> int:
    """Give each leaf a kept host buffer (pinned for a device tensor) with its pages faulted in now,
    so that the save that fills it pays for the copy alone; returns the bytes allocated. Reads only
    the leaves' shapes and dtypes."""
    total = 0
    for key, value in leaves:
        if isinstance(value, np.ndarray):
            host: Any = np.empty(value.shape, value.dtype)
            host.reshape(-1).view(np.uint8).fill(0)
            total += host.nbytes
        else:
            from spothop.checkpoint import _torch_arrays as ta

            host = ta.empty_host(value)
            total += host.numel() * host.element_size()
        buffers.put(key, host)
    return total


# A streamed copy copies this much (on every core) before it hands the leaves to the writer: large
# enough that each step keeps both threads of :func:`bulk.copy` busy, small enough that the writer
# starts within a few milliseconds.
STREAM_STEP_BYTES = 32 * 1024 * 1024


class StreamedCopy:
    """The bulk of a save's host copy, made while the writer already runs, one step behind it.

    A full save of CPU tensors copies them into their host buffers, then hashes and writes those
    buffers: done one after the other, the disk idles during the copy (a fifth of a 256 MiB local
    save here). Here the buffers are known first (``take_snapshot(stream=True)`` makes the leaves
    without copying), the write is queued, and :meth:`run` (on the caller's thread: the save
    still returns only once the state is copied) copies the leaves in file order, in steps of
    ``STREAM_STEP_BYTES``, releasing each leaf to the writer as soon as its bytes are in. The
    writer calls :meth:`wait` before it reads a leaf. :meth:`run` never waits for the writer, so
    neither can block the other; a failed copy fails the write with the same error.
    """

    def __init__(self, parts: list[tuple[str, Bytes, Bytes]]) -> None:
        self._parts = parts  # (leaf key, host bytes, live bytes), in the order the writer reads
        self._waiting = {key for key, _, _ in parts}
        self._changed = threading.Condition()
        self._error: BaseException | None = None
        self.seconds = 0.0  # how long :meth:`run` took: part of the save's stall

    def wait(self, key: str) -> None:
        """Block until leaf ``key`` is copied (at once for a leaf this copy does not hold)."""
        with self._changed:
            self._changed.wait_for(lambda: key not in self._waiting or self._error is not None)
            if key in self._waiting and self._error is not None:
                raise self._error

    def run(self) -> None:
        started = time.perf_counter()
        try:
            step: list[tuple[str, Bytes, Bytes]] = []
            size = 0
            for index, part in enumerate(self._parts):
                step.append(part)
                size += len(part[1])
                last = index == len(self._parts) - 1
                if size >= STREAM_STEP_BYTES or last:
                    bulk.copy([(host, live) for _, host, live in step])
                    with self._changed:
                        if last:  # before the writer can finish and read it
                            self.seconds = time.perf_counter() - started
                        self._waiting.difference_update(key for key, _, _ in step)
                        self._changed.notify_all()
                    step, size = [], 0
        except BaseException as exc:
            with self._changed:
                self.seconds = time.perf_counter() - started
                self._error = exc
                self._changed.notify_all()
            raise


@dataclass(frozen=True)
class Snapshot:
    tree: Any
    leaves: list[HostLeaf]
    version_keys: dict[str, Any]
    blocking_s: float  # of :func:`take_snapshot` (a streamed copy adds ``streamed.seconds``)
    copied_bytes: int
    matched_chunks: int = (
        0  # chunks found equal to the delta base by byte comparison: not copied, not hashed
    )
    streamed: StreamedCopy | None = None  # the copy still to run (``take_snapshot(stream=True)``)

    @property
    def stall_s(self) -> float:
        """The whole copy's time: the snapshot's and its streamed part's."""
        return self.blocking_s + (self.streamed.seconds if self.streamed is not None else 0.0)


@dataclass
class _Counts:
    copied: int = 0
    matched: int = 0


def take_snapshot(
    flat: tree.Flattened,
    base: DeltaBase | None,
    track_versions: bool,
    buffers: HostBuffers | None = None,
    skip_unchanged: bool = False,
    *,
    save_id: str | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    frozen: frozenset[str] = frozenset(),
    stream: bool = False,
    direct: tuple[Mapping[str, HostLeaf], Mapping[str, Any]] | None = None,
) -> Snapshot:
    """Copy a flattened state's arrays to host memory; with ``base`` (a delta), skip what is provably unchanged.

    With ``buffers``, host copies are reused between saves (see the module doc); without, every
    array is copied into fresh memory. ``save_id`` names this save: a full save (no ``base``)
    records it in the buffers it fills, so that a later delta against it can compare with them.
    ``chunk_bytes`` must be the chunk size the pack writer will use. ``frozen`` names leaves whose
    version counters are trusted whatever ``track_versions`` and ``skip_unchanged`` say (frozen
    weights): unchanged, they are neither copied nor compared. With ``stream`` the CPU tensors'
    bulk copy is left to the returned snapshot's :class:`StreamedCopy` (``streamed``), whose
    ``run()`` the caller must call. ``direct`` (a synchronous full save's leaves written from the
    caller's arrays, and their version keys: :func:`saving.direct_leaves`) are taken as they are:
    not copied, their kept buffers left as they were.
    """
    started = time.perf_counter()
    held = buffers if buffers is not None else HostBuffers()
    held.keep_only(flat.arrays)
    given, keys = (dict(direct[0]), dict(direct[1])) if direct is not None else ({}, {})
    torch_keys = [
        k for k, v in flat.arrays.items() if not isinstance(v, np.ndarray) and k not in given
    ]
    leaves: dict[str, HostLeaf] = given
    counts = _Counts()
    # A full save's buffers hold what it stores; a delta's copies belong to no checkpoint a later delta could use.
    saved_as = save_id if base is None else None
    compare = base if buffers is not None else None
    pending: list[_Pending] = []  # leaves to compare with their kept copies, all in one batch
    deferred: list[tuple[str, Bytes, Bytes]] | None = [] if stream else None
    if torch_keys:
        _torch_leaves(
            flat.arrays,
            torch_keys,
            base,
            track_versions,
            keys,
            held,
            leaves,
            skip_unchanged and buffers is not None,
            compare,
            saved_as,
            chunk_bytes,
            counts,
            pending,
            frozen if buffers is not None else frozenset(),
            deferred,
        )
    for key, value in flat.arrays.items():
        if not isinstance(value, np.ndarray) or key in given:
            continue
        old = held.get(key)
        matched = _compare_numpy(key, value, old, compare, chunk_bytes)
        if matched is not None:
            pending.append(matched)
            continue
        if old is not None and _fits(old, value):
            copy = old.host
            np.copyto(copy, value)
        else:
            copy = np.array(value, copy=True, order="C")
        held.put(key, copy, saved_as=saved_as)
        counts.copied += copy.nbytes
        data = copy.reshape(-1).view(np.uint8)
        leaves[key] = HostLeaf(key, "numpy", copy.dtype.str, tuple(copy.shape), data, owner=copy)
    for leaf in _compare_pending(pending, chunk_bytes, counts):
        leaves[leaf.key] = leaf
    if buffers is None:
        held.clear()
    ordered = [leaves[k] for k in flat.arrays]
    return Snapshot(
        flat.tree,
        ordered,
        keys,
        time.perf_counter() - started,
        counts.copied,
        counts.matched,
        StreamedCopy(_in_order(deferred, flat.arrays)) if deferred else None,
    )


def _in_order(
    parts: list[tuple[str, Bytes, Bytes]], keys: Mapping[str, Any]
) -> list[tuple[str, Bytes, Bytes]]:
    """``parts`` in the order of ``keys`` (the order the writer reads the leaves in)."""
    position = {key: index for index, key in enumerate(keys)}
    return sorted(parts, key=lambda part: position[part[0]])


def _torch_leaves(
    arrays: Mapping[str, Any],
    torch_keys: list[str],
    base: DeltaBase | None,
    track_versions: bool,
    keys: dict[str, Any],
    held: HostBuffers,
    out: dict[str, HostLeaf],
    skip_unchanged: bool,
    compare: DeltaBase | None,
    saved_as: str | None,
    chunk_bytes: int,
    counts: _Counts,
    pending: list[_Pending],
    frozen: frozenset[str],
    deferred: list[tuple[str, Bytes, Bytes]] | None = None,
) -> None:
    """Fill ``out`` with the torch leaves, counting the bytes actually copied and the chunks matched;
    leaves to compare with their kept copies on the host go to ``pending`` instead. With
    ``deferred`` the bulk copy of CPU tensors is appended there (leaf key, host bytes, live bytes)
    instead of made."""
    from spothop.checkpoint import _torch_arrays as ta

    to_copy: list[str] = []
    into: list[Any] = []
    for key in torch_keys:
        tensor = arrays[key]
        keys[key] = ta.source_of(tensor)
        reuse = _unchanged(base, key, tensor) if track_versions or key in frozen else None
        old = held.get(key)
        if reuse is not None:
            out[key] = HostLeaf(
                key, "torch", ta.dtype_name(tensor), tuple(tensor.shape), None, reuse=reuse
            )
            continue
        matched = _compare_torch(key, tensor, old, compare, chunk_bytes, counts)
        if matched is not None:
            assert old is not None
            old.source = keys[key]  # the buffer will equal the live tensor, as after a copy
            if isinstance(matched, _Pending):
                pending.append(matched)
            else:
                out[key] = matched
        elif (
            (skip_unchanged or key in frozen)
            and old is not None
            and old.source is not None
            and old.source.matches(tensor)
        ):
            # Unchanged since the previous save: its host copy is still exact. A full save now stores
            # exactly these bytes, so the buffer holds that save; a delta leaves its record alone.
            if saved_as is not None:
                old.saved_as, old.dirty = saved_as, set()
            out[key] = HostLeaf(
                key,
                "torch",
                ta.dtype_name(old.host),
                tuple(old.host.shape),
                ta.as_bytes(old.host),
                owner=old.host,
            )
        else:
            to_copy.append(key)
            into.append(old.host if old is not None and ta.fits(old.host, tensor) else None)
    later: list[tuple[int, Bytes, Bytes]] | None = [] if deferred is not None else None
    hosts = ta.host_copies([arrays[k] for k in to_copy], into, later)
    if deferred is not None and later:
        deferred += [(to_copy[index], host, live) for index, host, live in later]
    for key, host in zip(to_copy, hosts, strict=True):
        held.put(key, host, keys[key], saved_as)
        out[key] = HostLeaf(
            key, "torch", ta.dtype_name(host), tuple(host.shape), ta.as_bytes(host), owner=host
        )
        counts.copied += host.numel() * host.element_size()


def _base_chunks(
    compare: DeltaBase | None,
    key: str,
    old: _Held | None,
    kind: str,
    dtype: str,
    shape: tuple[int, ...],
    nbytes: int,
    chunk_bytes: int,
) -> tuple[ChunkRef, ...] | None:
    """The base's chunks of ``key`` when ``old`` (the retained host copy) holds that checkpoint's bytes
    in the layout this save will cut; None: compare nothing, copy and hash as usual."""
    if (
        compare is None
        or old is None
        or nbytes == 0
        or old.saved_as != compare.manifest.checkpoint_id
    ):
        return None
    entry = compare.manifest.leaves.get(key)
    if entry is None or (entry.kind, entry.dtype, entry.shape) != (kind, dtype, shape):
        return None
    # Chunk i of the buffer stands for the base's chunk i only if both are cut at the same offsets.
    if tuple(c.raw_bytes for c in entry.chunks) != _chunk_sizes(nbytes, chunk_bytes):
        return None
    return entry.chunks


def _chunk_sizes(nbytes: int, chunk_bytes: int) -> tuple[int, ...]:
    return tuple(min(chunk_bytes, nbytes - start) for start in range(0, nbytes, chunk_bytes))


@dataclass(frozen=True)
class _Pending:
    """A leaf to compare chunk by chunk with its kept host copy (which holds the base's bytes)."""

    key: str
    kind: str
    dtype: str
    shape: tuple[int, ...]
    live: Bytes
    host: Bytes
    owner: Any
    chunks: tuple[ChunkRef, ...]  # the base's
    dirty: set[int]


def _compare_torch(
    key: str,
    tensor: Any,
    old: _Held | None,
    compare: DeltaBase | None,
    chunk_bytes: int,
    counts: _Counts,
) -> HostLeaf | _Pending | None:
    """The delta leaf of a tensor found by comparing it with its retained host copy (on the device for a
    device tensor; on the host later, with every other leaf, as a :class:`_Pending`); None: not possible."""
    from spothop.checkpoint import _torch_arrays as ta

    if old is None or not ta.fits(old.host, tensor):
        return None
    dtype, shape = ta.dtype_name(tensor), tuple(tensor.shape)
    chunks = _base_chunks(
        compare,
        key,
        old,
        "torch",
        dtype,
        shape,
        tensor.numel() * tensor.element_size(),
        chunk_bytes,
    )
    if chunks is None:
        return None
    host = ta.as_bytes(old.host)
    if tensor.device.type == "cpu":
        live = ta.plain_bytes(tensor)
        if live is None:
            return None
        return _Pending(key, "torch", dtype, shape, live, host, old.host, chunks, old.dirty)
    else:
        # Compare where the tensor lives: only the chunks that differ are copied over the bus.
        check = [i not in old.dirty for i in range(len(chunks))]
        changed = ta.compare_on_device(tensor, old.host, chunk_bytes, check)
        if changed is None:
            return None
        indices = [i for i, differs in enumerate(changed) if differs]
        ta.copy_chunks_from_device(tensor, old.host, chunk_bytes, indices)
        known = _record(chunks, changed, old.dirty, counts)
    return HostLeaf(key, "torch", dtype, shape, host, owner=old.host, known=known)


def _compare_numpy(
    key: str,
    value: np.ndarray[Any, Any],
    old: _Held | None,
    compare: DeltaBase | None,
    chunk_bytes: int,
) -> _Pending | None:
    if old is None or not _fits(old, value) or not value.flags.c_contiguous:
        return None
    shape = tuple(value.shape)
    chunks = _base_chunks(
        compare, key, old, "numpy", value.dtype.str, shape, value.nbytes, chunk_bytes
    )
    if chunks is None:
        return None
    return _Pending(
        key,
        "numpy",
        value.dtype.str,
        shape,
        value.reshape(-1).view(np.uint8),
        old.host.reshape(-1).view(np.uint8),
        old.host,
        chunks,
        old.dirty,
    )


def _compare_pending(pending: list[_Pending], chunk_bytes: int, counts: _Counts) -> list[HostLeaf]:
    """Compare every pending leaf's chunks with its kept copy in one batch (all cores, see :mod:`bulk`),
    then copy the differing (or dirty) chunks into the copies, also in one batch. See :func:`_record`."""

    def window(index: int) -> slice:
        return slice(index * chunk_bytes, (index + 1) * chunk_bytes)

    checked = [
        (which, index)
        for which, leaf in enumerate(pending)
        for index in range(len(leaf.chunks))
        if index not in leaf.dirty
    ]
    same = bulk.equal(
        [
            (pending[which].live[window(index)], pending[which].host[window(index)])
            for which, index in checked
        ]
    )
    changed = [[index in leaf.dirty for index in range(len(leaf.chunks))] for leaf in pending]
    for (which, index), equal in zip(checked, same, strict=True):
        changed[which][index] = not equal
    bulk.copy(
        [
            (leaf.host[window(index)], leaf.live[window(index)])
            for which, leaf in enumerate(pending)
            for index, differs in enumerate(changed[which])
            if differs
        ]
    )
    return [
        HostLeaf(
            leaf.key,
            leaf.kind,
            leaf.dtype,
            leaf.shape,
            leaf.host,
            owner=leaf.owner,
            known=_record(leaf.chunks, changed[which], leaf.dirty, counts),
        )
        for which, leaf in enumerate(pending)
    ]


def _record(
    chunks: tuple[ChunkRef, ...], changed: list[bool], dirty: set[int], counts: _Counts
) -> tuple[ChunkRef | None, ...]:
    """Per chunk: the base's ref when equal to it, else None (to hash and write). The changed chunks were
    copied into the buffer, which no longer holds the base there: they are marked dirty."""
    known: list[ChunkRef | None] = []
    for index, (ref, differs) in enumerate(zip(chunks, changed, strict=True)):
        if differs:
            dirty.add(index)
            counts.copied += ref.raw_bytes
            known.append(None)
        else:
            counts.matched += 1
            known.append(ref)
    return tuple(known)


def _unchanged(base: DeltaBase | None, key: str, tensor: Any) -> LeafEntry | None:
    source = base.version_keys.get(key) if base is not None else None
    if base is None or source is None or not source.matches(tensor):
        return None
    return base.manifest.leaves.get(key)
