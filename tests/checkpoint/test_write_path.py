"""The local write path: early writeback, GIL-free hashing and the commit's folder fsync.

None of it may change a stored byte: a pack written with writeback kicks is byte-identical to
one written without, and to the format's definition (raw chunks in leaf order, a Merkle root
of their sha256 digests); verification on load still catches a flipped bit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import itertools
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import xxhash
from fsspec.implementations.local import LocalFileSystem

from spothop.checkpoint import Checkpointer, CheckpointWriteError, NoValidCheckpoint, Tier
from spothop.checkpoint import store as store_mod
from spothop.checkpoint.manifest import FILE_DIGEST_DOMAIN_V4, LeafEntry, Manifest, sha256_digest
from tests.waiting import scaled

CHUNK = 1024
WINDOW = 4096  # a few chunks: every save below kicks writeback several times


def state() -> dict[str, object]:
    rng = np.random.default_rng(7)
    return {
        "w": rng.standard_normal(5000).astype(np.float32),
        "b": rng.integers(0, 9, 777, dtype=np.int64),
        "empty": np.zeros(0, dtype=np.float32),
        "step": 3,
    }


def save_local(root: Path) -> tuple[Manifest, bytes]:
    with Checkpointer(
        str(root / "durable"), local_url=str(root / "local"), chunk_bytes=CHUNK
    ) as ckpt:
        manifest = ckpt.save(state(), 1, tier=Tier.LOCAL).wait()
    (entry,) = manifest.files
    return manifest, (root / "local" / entry.path).read_bytes()


@pytest.mark.parametrize("size", [0, 1, 2047, 2048, 4 * 1024 * 1024 + 3])
def test_sha256_digest_is_sha256(size: int) -> None:
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    assert sha256_digest(memoryview(data.data)) == hashlib.sha256(data.tobytes()).digest()


def test_early_writeback_kicks_tile_the_file_and_change_no_byte() -> None:
    kicks: list[tuple[int, int, int]] = []

    def kick(fd: int, offset: int, count: int, flags: int) -> int:
        kicks.append((offset, count, flags))
        return 0

    sink = io.BytesIO()
    sink.fileno = lambda: 99  # type: ignore[method-assign]
    stream = store_mod._EarlyWriteback(sink, kick)
    payloads = [bytes([i]) * 1500 for i in range(10)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_mod, "WRITEBACK_WINDOW_BYTES", WINDOW)
        for payload in payloads:
            assert stream.write(memoryview(payload)) == len(payload)
    assert sink.getvalue() == b"".join(payloads)
    assert kicks and all(flags == store_mod.SYNC_FILE_RANGE_WRITE for _, _, flags in kicks)
    offsets = [off for off, _, _ in kicks]
    assert offsets[0] == 0 and all(
        off + n == nxt for (off, n, _), nxt in zip(kicks, offsets[1:], strict=False)
    )
    assert all(n >= WINDOW for _, n, _ in kicks)


def test_pack_is_byte_identical_with_and_without_early_writeback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "WRITEBACK_WINDOW_BYTES", WINDOW)
    kicked: list[int] = []
    real = store_mod._sync_file_range

    def kick(fd: int, offset: int, count: int, flags: int) -> int:
        kicked.append(count)
        return real(fd, offset, count, flags) if real is not None else 0

    monkeypatch.setattr(store_mod, "_sync_file_range", kick)
    with_kicks, data_kicks = save_local(tmp_path / "a")
    assert kicked, "the save never started writeback early"
    monkeypatch.setattr(store_mod, "_sync_file_range", None)
    plain, data_plain = save_local(tmp_path / "b")
    assert data_kicks == data_plain
    assert with_kicks.files[0].sha256 == plain.files[0].sha256
    assert with_kicks.files[0].segments == plain.files[0].segments
    # The format itself, computed independently: raw chunks in leaf order, then the Merkle root.
    arrays = [v for v in state().values() if isinstance(v, np.ndarray)]
    expected = b"".join(a.tobytes() for a in arrays)
    assert data_plain == expected
    segments = plain.files[0].segments
    assert segments is not None
    starts = np.cumsum([0, *segments[:-1]])
    chunks = [expected[int(i) : int(i) + size] for i, size in zip(starts, segments, strict=True)]
    assert all(len(c) <= CHUNK for c in chunks)
    root = xxhash.xxh3_128(FILE_DIGEST_DOMAIN_V4)
    for chunk in chunks:
        root.update(xxhash.xxh3_128(chunk).digest())
    assert plain.files[0].sha256 == root.hexdigest()


def test_a_flipped_bit_in_an_early_written_pack_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "WRITEBACK_WINDOW_BYTES", WINDOW)
    manifest, data = save_local(tmp_path)
    pack = tmp_path / "local" / manifest.files[0].path
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x10
    pack.write_bytes(bytes(damaged))
    with pytest.raises(NoValidCheckpoint):
        Checkpointer(str(tmp_path / "durable"), local_url=str(tmp_path / "local")).restore(
            apply_rng=False
        )


def test_the_commit_fsyncs_the_manifest_folder_and_the_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[Path] = []
    real = store_mod._fsync_dir

    def record(path: Path) -> None:
        synced.append(path)
        real(path)

    monkeypatch.setattr(store_mod, "_fsync_dir", record)
    manifest, _ = save_local(tmp_path)
    local = tmp_path / "local"
    assert local / manifest.checkpoint_id in synced and local in synced


# -- positional writes: each hashing thread writes its chunk at an offset fixed in advance ------------


def big_state() -> dict[str, object]:
    rng = np.random.default_rng(11)
    return {f"t{i}": rng.standard_normal(3000 + 97 * i).astype(np.float32) for i in range(12)} | {
        "empty": np.zeros(0, dtype=np.float32),
        "ints": rng.integers(0, 5, 4001, dtype=np.int64),
    }


def save_tiers(ckpt: Checkpointer, tier: Tier) -> Manifest:
    """One save of ``tier``: for an emergency delta, after a durable base and a change to a few leaves."""
    leaves = big_state()
    if tier is not Tier.EMERGENCY:
        return ckpt.save(leaves, 1, tier=tier).wait()
    ckpt.save(leaves, 1, tier=Tier.DURABLE).wait()
    for key in ("t2", "t7", "ints"):
        leaves[key] = leaves[key] + 1  # type: ignore[operator]
    return ckpt.save(leaves, 2, tier=Tier.EMERGENCY).wait()


@pytest.mark.parametrize("tier", [Tier.LOCAL, Tier.DURABLE, Tier.EMERGENCY])
def test_placed_pack_is_byte_identical_to_the_ordered_writer_whatever_the_thread_timing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tier: Tier
) -> None:
    """Raw chunks (local), compressed ones of unknown size (durable: the integer leaf compresses) and
    deltas (chunks equal to the parent store nothing) all land where the ordered writer puts them."""
    from spothop.checkpoint import pack as pack_mod

    order: list[int] = []
    real_place = pack_mod._encode_and_place
    jitter = iter(np.random.default_rng(3).uniform(0, 0.004, 10_000))

    def slow_place(*args: object) -> tuple[object, int]:
        time.sleep(float(next(jitter)))  # finish in a scrambled order
        done, start = real_place(*args)  # type: ignore[arg-type]
        order.append(start)
        return done, start

    monkeypatch.setattr(pack_mod, "_encode_and_place", slow_place)
    monkeypatch.setattr(store_mod, "WRITEBACK_WINDOW_BYTES", WINDOW)
    with Checkpointer(
        str(tmp_path / "d"), local_url=str(tmp_path / "a"), chunk_bytes=CHUNK, workers=4
    ) as ckpt:
        placed = save_tiers(ckpt, tier)
    assert order != sorted(order), "the chunks were written in file order: the test proves nothing"
    # The same saves through the ordered stream writer (stores that are not plain local folders).
    monkeypatch.setattr(pack_mod, "_encode_and_place", real_place)
    with Checkpointer(
        str(tmp_path / "d2"), local_url=str(tmp_path / "b"), chunk_bytes=CHUNK, workers=4
    ) as ckpt:
        for store in (ckpt.local, ckpt.durable):
            store.is_local = False
            store.fs = LocalFileSystem(auto_mkdir=True)
        ordered = save_tiers(ckpt, tier)
    root_a, root_b = (
        (tmp_path / "a", tmp_path / "b")
        if tier is Tier.LOCAL
        else (tmp_path / "d", tmp_path / "d2")
    )
    (placed_file,), (ordered_file,) = placed.files, ordered.files
    data = (root_a / placed_file.path).read_bytes()
    assert data == (root_b / ordered_file.path).read_bytes()
    assert (placed_file.sha256, placed_file.size_bytes, placed_file.segments) == (
        ordered_file.sha256,
        ordered_file.size_bytes,
        ordered_file.segments,
    )
    if tier is Tier.LOCAL:
        assert data == b"".join(
            v.tobytes() for v in big_state().values() if isinstance(v, np.ndarray)
        )
    if tier is Tier.DURABLE:
        assert any(c.codec.value != "raw" for c in placed.leaves["/ints"].chunks), (
            "nothing was compressed"
        )
    if tier is Tier.EMERGENCY:
        assert placed.parent is not None and placed_file.size_bytes < 4 * 4001 * 8
    renamed = {
        k: replace_file(v, ordered_file.path, placed_file.path) for k, v in ordered.leaves.items()
    }
    assert placed.leaves == {
        k: replace_parent(v, ordered.parent, placed.parent) for k, v in renamed.items()
    }
    restored = Checkpointer(str(tmp_path / "d"), local_url=str(tmp_path / "a")).restore(
        apply_rng=False
    )
    assert restored is not None and restored.manifest.checkpoint_id == placed.checkpoint_id
    expected = big_state()
    if tier is Tier.EMERGENCY:
        expected = {k: v + 1 if k in ("t2", "t7", "ints") else v for k, v in expected.items()}  # type: ignore[operator]
    for key, value in expected.items():
        assert np.array_equal(restored.state[key], value)


def test_a_failing_worker_ends_the_save_without_leaving_anyone_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk that fails to encode must not strand the workers waiting for sizes (a hang), and the
    save fails with that chunk's error (not with the cancellation of a worker that was waiting for a
    slow chunk before it) and no manifest."""
    from spothop.checkpoint import pack as pack_mod

    real = pack_mod.encode_chunk
    calls = itertools.count()
    lock = threading.Lock()

    def failing(*args: object, **kwargs: object) -> object:
        with lock:
            call = next(calls)
        if call == 4:
            time.sleep(0.2)  # slow: the next chunk finishes first and waits for this one's size
        if call == 6:
            time.sleep(0.05)  # fails while the chunk before it waits
            raise OSError(5, "simulated I/O error")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pack_mod, "encode_chunk", failing)
    ckpt = Checkpointer(
        str(tmp_path / "d"), local_url=str(tmp_path / "a"), chunk_bytes=CHUNK, workers=4
    )
    handle = ckpt.save(big_state(), 1, tier=Tier.DURABLE)
    with pytest.raises(CheckpointWriteError, match="simulated I/O error"):
        handle.wait(timeout=scaled(20))
    assert not list((tmp_path / "d").glob("*/manifest.json"))
    ckpt.close()


def replace_file(entry: LeafEntry, old: str, new: str) -> LeafEntry:
    return LeafEntry(
        entry.kind,
        entry.dtype,
        entry.shape,
        tuple(dataclasses.replace(c, file=new) if c.file == old else c for c in entry.chunks),
    )


def replace_parent(entry: LeafEntry, old: str | None, new: str | None) -> LeafEntry:
    """Chunks a delta takes from its parent name the parent's file, whose folder is the parent's id."""
    if old is None or new is None:
        return entry
    return LeafEntry(
        entry.kind,
        entry.dtype,
        entry.shape,
        tuple(
            dataclasses.replace(c, file=c.file.replace(old, new, 1))
            if c.file.startswith(old + "/")
            else c
            for c in entry.chunks
        ),
    )


def test_a_local_full_save_uses_positional_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real = os.pwrite

    def spy(fd: int, data: object, offset: int) -> int:
        writes.append(offset)
        return real(fd, data, offset)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "pwrite", spy)
    manifest, _ = save_local(tmp_path)
    assert writes and manifest.files[0].segments is not None
    assert len(writes) == len(manifest.files[0].segments)


def test_short_positional_writes_are_completed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.pwrite

    def short(fd: int, data: memoryview, offset: int) -> int:
        return real(fd, data[: max(1, len(data) // 3)], offset)

    monkeypatch.setattr(os, "pwrite", short)
    _, data = save_local(tmp_path)
    assert data == b"".join(v.tobytes() for v in state().values() if isinstance(v, np.ndarray))


def test_positional_writeback_kicks_tile_the_contiguous_prefix() -> None:
    kicks: list[tuple[int, int]] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_mod, "WRITEBACK_WINDOW_BYTES", WINDOW)
        target = store_mod.PositionalFile(-1, lambda fd, off, n, flags: kicks.append((off, n)) or 0)
        mp.setattr(os, "pwrite", lambda fd, data, offset: len(data))
        sizes = [1500] * 12
        offsets = list(np.cumsum([0, *sizes[:-1]]))
        for i in [3, 1, 0, 2, 7, 5, 6, 4, 11, 8, 9, 10]:  # out of order
            target.pwrite(b"x" * sizes[i], int(offsets[i]))
    assert kicks and kicks[0][0] == 0
    assert all(off + n == nxt for (off, n), (nxt, _) in itertools.pairwise(kicks))
    assert all(n >= WINDOW for _, n in kicks) and kicks[-1][0] + kicks[-1][1] <= sum(sizes)


@pytest.mark.parametrize("tier", [Tier.LOCAL, Tier.DURABLE])
def test_superseded_checkpoints_are_deleted_after_the_save_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tier: Tier
) -> None:
    from spothop.checkpoint import checkpointer as ckpt_mod

    release = threading.Event()
    real = ckpt_mod.gc_mod.collect

    def blocked(store: store_mod.Store, keep: int, **kwargs: object) -> object:
        assert release.wait(scaled(10))
        return real(store, keep, **kwargs)  # type: ignore[arg-type]

    folder = tmp_path / ("local" if tier is Tier.LOCAL else "d")
    ckpt = Checkpointer(
        str(tmp_path / "d"),
        local_url=str(tmp_path / "local"),
        keep_local=1,
        keep_chains=1,
        chunk_bytes=CHUNK,
    )
    ckpt.save(state(), 1, tier=tier).wait()
    ckpt.wait()
    monkeypatch.setattr(ckpt_mod.gc_mod, "collect", blocked)
    second = ckpt.save(state(), 2, tier=tier)
    second.wait(
        timeout=scaled(5)
    )  # returns although the clean-up is blocked: it is off the save's path
    assert len(list(folder.glob("step-*"))) == 2
    release.set()
    ckpt.wait()
    assert [p.name for p in folder.glob("step-*")] == [second.checkpoint_id]
    ckpt.close()
