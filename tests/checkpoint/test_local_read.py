"""A local pack file read by every worker at once (``local_read``), and raw chunks hashed and
written a piece at a time (``pack._hash_and_place``): the same bytes and digests as the one-thread
paths, whatever the piece size, and damage still caught in every segment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spothop.checkpoint import CheckpointCorrupt, Checkpointer, Tier, local_read, pack
from spothop.checkpoint.manifest import Digest, Manifest, segment_digest, segment_hasher
from spothop.checkpoint.reader import ancestors, read_leaves, verify
from spothop.checkpoint.store import Store

CHUNK = 4096


def mixed_state(seed: int) -> dict[str, object]:
    """Raw floats (several chunks, the last one short), compressible zeros, an empty leaf, a scalar."""
    rng = np.random.default_rng(seed)
    return {
        "w": rng.standard_normal(10_000).astype(np.float32),
        "z": np.zeros(3000, dtype=np.float32),
        "empty": np.zeros(0, dtype=np.float32),
        "b": rng.integers(0, 255, 777, dtype=np.uint8),
        "step": seed,
    }


def save_chain(root: Path) -> tuple[Manifest, dict[str, object]]:
    """A durable full save (zstd on: raw and compressed chunks) and an emergency delta over it."""
    ckpt = Checkpointer(str(root), chunk_bytes=CHUNK, keep_chains=5, zstd_levels={Tier.DURABLE: 3})
    state = mixed_state(1)
    ckpt.save(state, 1).wait()
    state["w"] = np.asarray(state["w"]).copy()
    state["w"][:100] += 1  # type: ignore[index]
    delta = ckpt.save(state, 2, tier=Tier.EMERGENCY).wait()
    ckpt.close()
    return delta, state


def leaves_sequentially(store: Store, manifest: Manifest) -> dict[str, np.ndarray]:
    """The same leaves through the one-reader path any file object takes."""
    store.is_local = False
    try:
        return read_leaves(store, manifest, ancestors(store, manifest))
    finally:
        store.is_local = True


@pytest.mark.parametrize("piece", [local_read.SUB_READ_BYTES, 1000, 4096])
def test_every_worker_reads_the_same_bytes_as_one_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    monkeypatch.setattr(local_read, "SUB_READ_BYTES", piece)
    delta, state = save_chain(tmp_path)
    store = Store(str(tmp_path))
    chain = ancestors(store, delta)
    assert chain and delta.files, "a delta over a full save: two pack files to read"
    parallel = read_leaves(store, delta, chain)
    sequential = leaves_sequentially(store, delta)
    assert parallel.keys() == sequential.keys()
    for key in parallel:
        assert np.array_equal(parallel[key], sequential[key]), key
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert restored is not None and restored.step == 2
    assert np.array_equal(restored.state["w"], state["w"])
    assert np.array_equal(restored.state["z"], state["z"])


def test_a_flipped_bit_in_any_segment_fails_the_parallel_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_read, "SUB_READ_BYTES", 1000)  # several pieces per segment
    delta, _ = save_chain(tmp_path)
    store = Store(str(tmp_path))
    base = ancestors(store, delta)[0]
    (entry,) = base.files
    assert entry.segments is not None and len(entry.segments) > 3
    path = tmp_path / entry.path
    pristine = path.read_bytes()
    offset = 0
    for length in entry.segments:
        damaged = bytearray(pristine)
        damaged[offset + length - 1] ^= 0x10  # the last byte: the last piece of the segment
        path.write_bytes(bytes(damaged))
        with pytest.raises(CheckpointCorrupt, match=r"fails its xxh3-128 check|decompress|decodes"):
            read_leaves(store, delta, ancestors(store, delta))
        with pytest.raises(CheckpointCorrupt):
            verify(store, base)
        offset += length
    path.write_bytes(pristine[:-1])
    with pytest.raises(CheckpointCorrupt, match="bytes, manifest says"):
        verify(store, base)
    path.write_bytes(pristine)
    verify(store, delta)


def test_a_segment_that_shrinks_while_read_is_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    delta, _ = save_chain(tmp_path)
    store = Store(str(tmp_path))
    monkeypatch.setattr(local_read.os, "preadv", lambda fd, views, offset: 0)
    with pytest.raises(CheckpointCorrupt, match="bytes, manifest says"):
        verify(store, delta)


@pytest.mark.parametrize("piece", [1000, CHUNK, 3 * CHUNK])
def test_raw_chunks_written_piece_by_piece_are_the_bytes_and_digests_of_whole_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece: int
) -> None:
    state = mixed_state(3)
    raw = {Tier.DURABLE: None}  # no compression and no parent: every chunk takes the piece path
    real = pack._hash_and_place

    def whole_chunks(target: Any, offsets: Any, index: int, view: Any, digest: Digest) -> Any:
        """The one-shot way: the chunk hashed whole (``encode_chunk``), then written whole."""
        done = pack.encode_chunk(view, None, None, digest=digest)
        start = offsets.start(index)
        if len(view):
            target.pwrite(view, start)
        return done, start

    monkeypatch.setattr(pack, "_hash_and_place", whole_chunks)
    whole = Checkpointer(str(tmp_path / "whole"), chunk_bytes=CHUNK, zstd_levels=raw)
    expected = whole.save(state, 1).wait()
    whole.close()
    calls: list[int] = []
    monkeypatch.setattr(pack, "_hash_and_place", lambda *args: calls.append(1) or real(*args))
    monkeypatch.setattr(pack, "PIECE_BYTES", piece)
    pieces = Checkpointer(str(tmp_path / "pieces"), chunk_bytes=CHUNK, zstd_levels=raw)
    got = pieces.save(state, 1).wait()
    pieces.close()
    assert calls, "the raw chunks went through the piece path"
    assert [f.sha256 for f in got.files] == [f.sha256 for f in expected.files]

    def layout(manifest: Manifest) -> dict[str, list[tuple[object, ...]]]:
        return {
            key: [(c.offset, c.stored_bytes, c.raw_bytes, c.sha256, c.codec) for c in leaf.chunks]
            for key, leaf in manifest.leaves.items()
        }

    assert layout(got) == layout(expected)
    for mine, theirs in zip(got.files, expected.files, strict=True):
        assert (tmp_path / "pieces" / mine.path).read_bytes() == (
            tmp_path / "whole" / theirs.path
        ).read_bytes()
    restored = Checkpointer(str(tmp_path / "pieces")).restore(apply_rng=False)
    assert restored is not None and np.array_equal(restored.state["w"], state["w"])


@pytest.mark.parametrize("kind", list(Digest))
def test_the_incremental_hasher_gives_the_segment_digest(kind: Digest) -> None:
    data = np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes()
    hasher = segment_hasher(kind)
    for start in range(0, len(data), 999):
        hasher.update(data[start : start + 999])
    assert bytes(hasher.digest()) == segment_digest(kind, data)
