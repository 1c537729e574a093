"""What keeps a restore at disk speed without giving up a byte of checking: uncached local files
read with ``O_DIRECT`` into page-aligned leaf buffers (the same leaves as through the page cache,
damage still caught), files in the page cache read from it, the kept read threads shared by
restores at once, and each manifest parsed once per restore."""

from __future__ import annotations

import errno
import os
import threading
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spothop.checkpoint import CheckpointCorrupt, Checkpointer, Tier, local_read, reader
from spothop.checkpoint.manifest import Manifest
from spothop.checkpoint.reader import ancestors, read_leaves, verify
from spothop.checkpoint.store import Store

CHUNK = 16 * 1024  # several pages a segment, so that a segment has a head, whole pages and a tail


def state_of(seed: int) -> dict[str, object]:
    """Leaves whose offsets in the file fall at a page boundary, 64 bytes past one (a page phase a
    buffer can take) and anywhere (one it cannot), a compressible one and a scalar."""
    rng = np.random.default_rng(seed)
    return {
        "a": rng.integers(0, 255, 64, dtype=np.uint8),
        "b": rng.standard_normal(20_000).astype(np.float32),
        "c": rng.integers(0, 255, 777, dtype=np.uint8),
        "d": rng.standard_normal(30_000).astype(np.float32),
        "e": np.zeros(3000, dtype=np.float32),
        "step": seed,
    }


def save_chain(root: Path) -> tuple[Manifest, dict[str, object]]:
    """A durable full save (raw and zstd chunks) and an emergency delta over it."""
    ckpt = Checkpointer(str(root), chunk_bytes=CHUNK, keep_chains=5, zstd_levels={Tier.DURABLE: 3})
    state = state_of(1)
    ckpt.save(state, 1).wait()
    state["d"] = np.asarray(state["d"]).copy()
    state["d"][:5000] += 1  # type: ignore[index]
    delta = ckpt.save(state, 2, tier=Tier.EMERGENCY).wait()
    ckpt.close()
    return delta, state


class DirectReads:
    """Forces direct reads of every file, however cached, for every leaf, and counts them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        self.fds: set[int] = set()
        monkeypatch.setattr(local_read, "DIRECT_MAX_RESIDENT", 1.01)
        monkeypatch.setattr(reader, "DIRECT_MIN_LEAF_BYTES", 1)
        real_open, real_read = local_read.open_direct, local_read._DirectReads.read

        def opened(path: str, fd: int, size: int) -> int | None:
            direct = real_open(path, fd, size)
            if direct is not None:
                self.fds.add(direct)
            return direct

        def read(reads: Any, piece: memoryview, offset: int) -> int | None:
            got = real_read(reads, piece, offset)
            self.reads += got is not None
            return got

        monkeypatch.setattr(local_read, "open_direct", opened)
        monkeypatch.setattr(local_read._DirectReads, "read", read)


def direct_io_or_skip(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except (AttributeError, OSError):
        pytest.skip("this file system (or platform) has no O_DIRECT")
    try:
        if not local_read.on_local_disk(fd):
            pytest.skip("direct reads are for local disks; the tests' folder is on another kind")
    finally:
        os.close(fd)


def through_the_cache(store: Store, manifest: Manifest) -> dict[str, np.ndarray]:
    """The same leaves through the one-reader path any file object takes."""
    store.is_local = False
    try:
        return read_leaves(store, manifest, ancestors(store, manifest))
    finally:
        store.is_local = True


@pytest.mark.parametrize("piece", [local_read.DIRECT_READ_BYTES, 3 * 4096 + 100])
def test_files_read_directly_give_the_same_leaves_as_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    monkeypatch.setattr(local_read, "SUB_READ_BYTES", piece)
    monkeypatch.setattr(local_read, "DIRECT_READ_BYTES", piece)  # several direct reads a segment
    delta, state = save_chain(tmp_path)
    direct_io_or_skip(tmp_path / delta.files[0].path)
    store = Store(str(tmp_path))
    expected = through_the_cache(store, delta)
    forced = DirectReads(monkeypatch)
    got = read_leaves(store, delta, ancestors(store, delta))
    assert forced.reads, "whole pages were read directly"
    assert got.keys() == expected.keys()
    for key in got:
        assert np.array_equal(got[key], expected[key]), key
    verify(store, delta)  # every segment into scratch, directly where its pages allow
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert restored is not None and restored.step == 2
    for key in ("a", "b", "c", "d", "e"):
        assert np.array_equal(restored.state[key], state[key]), key


def test_a_flipped_bit_is_caught_in_pages_read_directly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    delta, _ = save_chain(tmp_path)
    store = Store(str(tmp_path))
    base = ancestors(store, delta)[0]
    (entry,) = base.files
    path = tmp_path / entry.path
    direct_io_or_skip(path)
    forced = DirectReads(monkeypatch)
    pristine = path.read_bytes()
    # A byte in a segment's head (through the cache) and one in its whole pages (direct).
    for offset in (100, 5 * 4096 + 7, len(pristine) - 1):
        damaged = bytearray(pristine)
        damaged[offset] ^= 0x01
        path.write_bytes(bytes(damaged))
        with pytest.raises(CheckpointCorrupt, match=r"fails its xxh3-128 check|decompress|decodes"):
            read_leaves(store, delta, ancestors(store, delta))
        with pytest.raises(CheckpointCorrupt):
            verify(store, base)
    assert forced.reads
    path.write_bytes(pristine)
    verify(store, delta)


def test_a_direct_read_the_disk_refuses_is_read_through_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    delta, state = save_chain(tmp_path)
    direct_io_or_skip(tmp_path / delta.files[0].path)
    forced = DirectReads(monkeypatch)
    real = os.preadv

    def refusing(fd: int, buffers: Any, offset: int, *flags: int) -> int:
        if fd in forced.fds:
            raise OSError(errno.EINVAL, "misaligned")
        return real(fd, buffers, offset, *flags)

    monkeypatch.setattr(local_read.os, "preadv", refusing)
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert forced.fds, "direct descriptors were opened"
    assert restored is not None and restored.step == 2
    for key in ("a", "b", "c", "d", "e"):
        assert np.array_equal(restored.state[key], state[key]), key


def test_a_file_off_a_local_disk_is_read_through_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, state = save_chain(tmp_path)
    forced = DirectReads(monkeypatch)
    monkeypatch.setattr(local_read, "_LOCAL_DISKS", frozenset())  # as if on NFS
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert not forced.fds and not forced.reads
    assert restored is not None and np.array_equal(restored.state["d"], state["d"])


def test_a_file_in_the_page_cache_is_read_from_it(tmp_path: Path) -> None:
    path = tmp_path / "data.pack"
    path.write_bytes(np.random.default_rng(0).bytes(64 * 4096))
    with open(path, "rb") as handle:
        handle.read()  # every page cached
        resident = local_read.resident_fraction(handle.fileno(), path.stat().st_size)
        if resident is None:
            pytest.skip("this platform cannot say which pages are cached")
        assert resident == 1.0
        assert local_read.open_direct(str(path), handle.fileno(), path.stat().st_size) is None


def test_leaves_start_at_their_page_phase_and_never_overlap() -> None:
    sizes = {"a": 100, "b": 50_000, "c": 7, "d": 5000, "e": reader.ARENA_BYTES + 10}
    phases = {"b": 64, "d": 0, "e": 192}
    buffers = reader._leaf_buffers(sizes, phases)
    spans = []
    for key, size in sizes.items():
        buffer = buffers[key]
        start = int(buffer.ctypes.data)
        assert len(buffer) == size
        assert start % 16 == 0, key  # the largest dtype's alignment, phased or not
        if key in phases:
            assert start % local_read.DIRECT_ALIGN == phases[key], key
        spans.append((start, start + size))
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in pairwise(spans))


def test_a_restore_parses_each_manifest_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    delta, _ = save_chain(tmp_path)
    parsed: Counter[str] = Counter()
    real = reader.manifest_from_json

    def counting(text: str | bytes, checkpoint_id: str) -> Manifest:
        parsed[checkpoint_id] += 1
        return real(text, checkpoint_id)

    monkeypatch.setattr(reader, "manifest_from_json", counting)
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert restored is not None and restored.manifest.checkpoint_id == delta.checkpoint_id
    assert parsed[delta.checkpoint_id] == 1 and parsed[delta.parent or ""] == 1
    assert set(parsed.values()) == {1}
    parsed.clear()
    Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert parsed[delta.checkpoint_id] == 1, "each restore reads what is on the disk afresh"


def test_restores_in_several_threads_at_once_share_the_read_threads(tmp_path: Path) -> None:
    _, state = save_chain(tmp_path)
    results: list[Any] = [None] * 4
    errors: list[BaseException] = []

    def restore(index: int) -> None:
        try:
            results[index] = Checkpointer(str(tmp_path)).restore(apply_rng=False)
        except BaseException as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=restore, args=(i,)) for i in range(len(results))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(thread.is_alive() for thread in threads)
    for restored in results:
        assert restored is not None and np.array_equal(restored.state["d"], state["d"])
