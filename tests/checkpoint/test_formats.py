"""Pack-file formats: 4 (XXH3-128 digests) is written; 3 (BLAKE3) where xxhash is missing, 2 (sha256)
where blake3 is missing too; every one read, alone or mixed in one delta chain, and damage to a file
of any format is caught like any other."""

from __future__ import annotations

import logging
from pathlib import Path

import blake3
import numpy as np
import pytest
import xxhash

from spothop.checkpoint import CheckpointCorrupt, Checkpointer, NoValidCheckpoint, Tier
from spothop.checkpoint import manifest as manifest_mod
from spothop.checkpoint.manifest import (
    FILE_DIGEST_DOMAIN_V3,
    FILE_DIGEST_DOMAIN_V4,
    Digest,
    Manifest,
)
from spothop.checkpoint.reader import ancestors, load_manifest, read_leaves, verify
from spothop.checkpoint.store import Store

CHUNK = 1024


def floats(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def full_and_delta(root: Path) -> tuple[Manifest, Manifest, dict[str, object]]:
    """A full save and an emergency delta over it (one leaf changed); returns both and the delta's state."""
    ckpt = Checkpointer(str(root), chunk_bytes=CHUNK, keep_chains=5, zstd_levels={Tier.DURABLE: 3})
    state: dict[str, object] = {"w": floats(3000), "z": np.zeros(700, dtype=np.float32), "step": 1}
    full = ckpt.save(state, 1).wait()
    state = {"w": state["w"], "z": np.ones(700, dtype=np.float32), "step": 2}
    delta = ckpt.save(state, 2, tier=Tier.EMERGENCY).wait()
    ckpt.close()
    return full, delta, state


def restore(root: Path) -> tuple[Manifest, dict[str, object]]:
    restored = Checkpointer(str(root)).restore(apply_rng=False)
    assert restored is not None
    return restored.manifest, restored.state


def without_xxhash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manifest_mod, "_xxhash", None)


def without_blake3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither fast hash importable: what is left is sha256 (format 2)."""
    without_xxhash(monkeypatch)
    monkeypatch.setattr(manifest_mod, "_blake3", None)


def test_a_save_writes_format_4_hashed_with_xxh3_and_restores(tmp_path: Path) -> None:
    full, delta, state = full_and_delta(tmp_path)
    for manifest in (full, delta):
        assert manifest.format_version == 4
        assert all(f.digest is Digest.XXH3 for f in manifest.files)
        assert all(len(f.sha256) == 32 for f in manifest.files)
    # The root, computed independently: XXH3-128 over the domain and each segment's, in order.
    (entry,) = full.files
    data = (tmp_path / entry.path).read_bytes()
    root, offset = xxhash.xxh3_128(FILE_DIGEST_DOMAIN_V4), 0
    assert entry.segments is not None
    for length in entry.segments:
        root.update(xxhash.xxh3_128(data[offset : offset + length]).digest())
        offset += length
    assert entry.sha256 == root.hexdigest()
    # A raw chunk's content hash is the XXH3-128 of its bytes, as deltas compare it.
    ref = full.leaves["/w"].chunks[0]
    raw = data[ref.offset : ref.offset + ref.stored_bytes]
    assert ref.sha256 == xxhash.xxh3_128(raw).hexdigest()
    reread = load_manifest(Store(str(tmp_path)), delta.checkpoint_id)
    assert reread == delta  # the digest kind comes back from the format, not from a field
    got, restored = restore(tmp_path)
    assert got.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(restored["w"], state["w"]) and np.all(restored["z"] == 1)  # type: ignore[call-overload]


def test_a_flipped_byte_in_a_format_4_delta_chain_is_caught_in_the_base(tmp_path: Path) -> None:
    full, delta, _ = full_and_delta(tmp_path)
    pack = tmp_path / full.files[0].path
    damaged = bytearray(pack.read_bytes())
    damaged[len(damaged) // 3] ^= 0x20
    pack.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointCorrupt, match="fails its xxh3-128 check"):
        verify(Store(str(tmp_path)), delta)
    with pytest.raises(NoValidCheckpoint):
        restore(tmp_path)


def test_a_format_4_delta_over_a_format_3_base_verifies_each_file_with_its_own_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_xxhash(monkeypatch)
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    base_state = {"w": floats(3000), "b": floats(3000, seed=5)}
    base = ckpt.save(base_state, 1).wait()
    monkeypatch.undo()
    changed = {"w": base_state["w"], "b": floats(3000, seed=6)}
    delta = ckpt.save(changed, 2, tier=Tier.EMERGENCY).wait()
    ckpt.close()
    assert (base.format_version, delta.format_version) == (3, 4)
    assert {f.digest for f in (*base.files, *delta.files)} == {Digest.BLAKE3, Digest.XXH3}
    assert any(ref.file == base.files[0].path for ref in delta.leaves["/w"].chunks)
    got, state = restore(tmp_path)
    assert got.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(state["w"], changed["w"]) and np.array_equal(state["b"], changed["b"])
    pack = tmp_path / base.files[0].path  # damage in the BLAKE3 base is still caught
    damaged = bytearray(pack.read_bytes())
    damaged[10] ^= 0x01
    pack.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointCorrupt, match="fails its blake3 check"):
        verify(Store(str(tmp_path)), delta)


def test_without_xxhash_a_format_4_checkpoint_is_skipped_with_the_package_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    without_xxhash(monkeypatch)
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    older = ckpt.save({"w": floats(2000, seed=1)}, 1).wait()
    monkeypatch.undo()
    newer = ckpt.save({"w": floats(2000, seed=2)}, 2).wait()
    ckpt.close()
    assert (older.format_version, newer.format_version) == (3, 4)
    without_xxhash(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="spothop.checkpoint"):
        got, state = restore(tmp_path)
    assert got.checkpoint_id == older.checkpoint_id
    assert np.array_equal(state["w"], floats(2000, seed=1))  # type: ignore[arg-type]
    assert "pip install xxhash" in caplog.text


def test_a_save_without_xxhash_writes_format_3_hashed_with_blake3_and_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_xxhash(monkeypatch)
    full, delta, state = full_and_delta(tmp_path)
    for manifest in (full, delta):
        assert manifest.format_version == 3
        assert all(f.digest is Digest.BLAKE3 for f in manifest.files)
    # The root, computed independently: BLAKE3 over the domain and each segment's BLAKE3, in order.
    (entry,) = full.files
    data = (tmp_path / entry.path).read_bytes()
    root, offset = blake3.blake3(FILE_DIGEST_DOMAIN_V3), 0
    assert entry.segments is not None
    for length in entry.segments:
        root.update(blake3.blake3(data[offset : offset + length]).digest())
        offset += length
    assert entry.sha256 == root.hexdigest()
    monkeypatch.undo()  # an upgraded process, xxhash installed, reads them
    reread = load_manifest(Store(str(tmp_path)), delta.checkpoint_id)
    assert reread == delta  # the digest kind comes back from the format, not from a field
    got, restored = restore(tmp_path)
    assert got.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(restored["w"], state["w"]) and np.all(restored["z"] == 1)  # type: ignore[call-overload]


def test_a_truncated_format_4_file_is_corrupt_and_restore_falls_back(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    older = ckpt.save({"w": floats(4000, seed=1)}, 1).wait()
    newer = ckpt.save({"w": floats(4000, seed=2)}, 2).wait()
    ckpt.close()
    pack = tmp_path / newer.files[0].path
    pack.write_bytes(pack.read_bytes()[:-100])
    store = Store(str(tmp_path))
    with pytest.raises(CheckpointCorrupt, match="bytes, manifest says"):
        read_leaves(store, newer, ancestors(store, newer))
    got, state = restore(tmp_path)
    assert got.checkpoint_id == older.checkpoint_id
    assert np.array_equal(state["w"], floats(4000, seed=1))  # type: ignore[arg-type]


def test_a_flipped_byte_in_a_format_3_delta_chain_is_caught_in_the_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_xxhash(monkeypatch)
    full, delta, _ = full_and_delta(tmp_path)
    pack = tmp_path / full.files[0].path
    damaged = bytearray(pack.read_bytes())
    damaged[len(damaged) // 3] ^= 0x20
    pack.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointCorrupt, match="fails its blake3 check"):
        verify(Store(str(tmp_path)), delta)
    with pytest.raises(NoValidCheckpoint):
        restore(tmp_path)


def test_without_blake3_a_save_writes_format_2_which_restores_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_blake3(monkeypatch)
    full, delta, state = full_and_delta(tmp_path)
    assert (full.format_version, delta.format_version) == (2, 2)
    assert all(f.digest is Digest.SHA256 for f in (*full.files, *delta.files))
    monkeypatch.undo()  # an upgraded process, blake3 installed, reads the old checkpoints
    got, restored = restore(tmp_path)
    assert got.format_version == 2 and got.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(restored["w"], state["w"]) and np.all(restored["z"] == 1)  # type: ignore[call-overload]
    verify(Store(str(tmp_path)), got)


def test_a_format_3_delta_over_a_format_2_base_verifies_each_file_with_its_own_hash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    without_blake3(monkeypatch)
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    base_state = {"w": floats(3000), "b": floats(3000, seed=5)}
    base = ckpt.save(base_state, 1).wait()
    monkeypatch.undo()
    without_xxhash(monkeypatch)
    changed = {"w": base_state["w"], "b": floats(3000, seed=6)}
    delta = ckpt.save(changed, 2, tier=Tier.EMERGENCY).wait()
    ckpt.close()
    assert (base.format_version, delta.format_version) == (2, 3)
    files = {f.path: f.digest for f in (*base.files, *delta.files)}
    assert set(files.values()) == {Digest.SHA256, Digest.BLAKE3}
    assert any(ref.file == base.files[0].path for ref in delta.leaves["/w"].chunks)
    got, state = restore(tmp_path)
    assert got.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(state["w"], changed["w"]) and np.array_equal(state["b"], changed["b"])
    pack = tmp_path / base.files[0].path  # damage in the sha256 base is still caught
    damaged = bytearray(pack.read_bytes())
    damaged[10] ^= 0x01
    pack.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointCorrupt, match="fails its sha256 check"):
        verify(Store(str(tmp_path)), delta)


def test_without_blake3_a_format_3_checkpoint_is_skipped_with_the_package_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    without_blake3(monkeypatch)
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    older = ckpt.save({"w": floats(2000, seed=1)}, 1).wait()
    monkeypatch.undo()
    without_xxhash(monkeypatch)
    newer = ckpt.save({"w": floats(2000, seed=2)}, 2).wait()
    ckpt.close()
    assert (older.format_version, newer.format_version) == (2, 3)
    without_blake3(monkeypatch)
    with caplog.at_level(logging.WARNING, logger="spothop.checkpoint"):
        got, state = restore(tmp_path)
    assert got.checkpoint_id == older.checkpoint_id
    assert np.array_equal(state["w"], floats(2000, seed=1))  # type: ignore[arg-type]
    assert "pip install blake3" in caplog.text


def test_leaves_of_every_size_and_dtype_restore_aligned_and_writable(tmp_path: Path) -> None:
    import torch

    state = {
        "odd": np.arange(3, dtype=np.int8),  # 3 bytes: the next leaf must not start unaligned
        "f64": np.linspace(0, 1, 7),
        "bf16": torch.randn(5).to(torch.bfloat16),
        "c128": np.array([1 + 2j, 3 - 4j]),
        "empty": np.zeros(0, dtype=np.float32),
        "t32": torch.arange(11, dtype=torch.int32),
    }
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK)
    ckpt.save(state, 1).wait()
    ckpt.close()
    _, restored = restore(tmp_path)
    for key, value in state.items():
        got = restored[key]
        if isinstance(value, np.ndarray):
            assert isinstance(got, np.ndarray) and got.dtype == value.dtype
            assert np.array_equal(got, value) and got.flags.writeable
            assert got.ctypes.data % got.dtype.alignment == 0
        else:
            assert isinstance(got, torch.Tensor) and torch.equal(got, value)
            got.add_(1)  # writable, and its own memory: the restored state is the caller's
