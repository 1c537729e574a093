"""Pack-file formats: 4 (XXH3-128 digests) is written; 3 (BLAKE3) where xxhash is missing, 2 (sha256)
where blake3 is missing too; every one read, alone or mixed in one delta chain, and damage to a file
of any format is caught like any other."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

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


# What a save writes with every fast hash importable (4) and without xxhash (3): the hash, and
# its domain, computed here independently of the library.
WRITTEN = [(4, xxhash.xxh3_128, FILE_DIGEST_DOMAIN_V4), (3, blake3.blake3, FILE_DIGEST_DOMAIN_V3)]


@pytest.mark.parametrize(("version", "hasher", "domain"), WRITTEN)
def test_a_save_writes_its_format_whose_digests_are_its_hash_and_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, hasher: Any, domain: bytes
) -> None:
    if version < 4:
        older_hash_only(monkeypatch, version)
    full, delta, state = full_and_delta(tmp_path)
    for manifest in (full, delta):
        assert manifest.format_version == version
        assert all(f.digest is Digest.of_format(version) for f in manifest.files)
    # The root: the hash over the domain and each segment's digest, in order.
    (entry,) = full.files
    data = (tmp_path / entry.path).read_bytes()
    root, offset = hasher(domain), 0
    assert entry.segments is not None
    for length in entry.segments:
        root.update(hasher(data[offset : offset + length]).digest())
        offset += length
    assert entry.sha256 == root.hexdigest()
    # A raw chunk's content hash is the hash of its bytes, as deltas compare it.
    ref = full.leaves["/w"].chunks[0]
    assert ref.sha256 == hasher(data[ref.offset : ref.offset + ref.stored_bytes]).hexdigest()
    monkeypatch.undo()  # an upgraded process, every hash importable, reads them
    reread = load_manifest(Store(str(tmp_path)), delta.checkpoint_id)
    assert reread == delta  # the digest kind comes back from the format, not from a field
    got, restored = restore(tmp_path)
    assert got.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(restored["w"], state["w"]) and np.all(restored["z"] == 1)  # type: ignore[call-overload]


@pytest.mark.parametrize("version", [4, 3, 2])
def test_a_flipped_byte_in_a_delta_chain_is_caught_in_the_base_whatever_the_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    if version < 4:
        older_hash_only(monkeypatch, version)
    full, delta, _ = full_and_delta(tmp_path)
    assert delta.format_version == version
    pack = tmp_path / full.files[0].path
    damaged = bytearray(pack.read_bytes())
    damaged[len(damaged) // 3] ^= 0x20
    pack.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointCorrupt, match=f"fails its {Digest.of_format(version)} check"):
        verify(Store(str(tmp_path)), delta)
    with pytest.raises(NoValidCheckpoint):
        restore(tmp_path)


def older_hash_only(monkeypatch: pytest.MonkeyPatch, old: int) -> None:
    """Only what format ``old`` hashes with (and older) importable."""
    if old == 2:
        without_blake3(monkeypatch)
    else:
        without_xxhash(monkeypatch)


def newer_hash_back(monkeypatch: pytest.MonkeyPatch, old: int) -> None:
    """An upgraded process: the hash of format ``old + 1`` importable again (not a newer one)."""
    monkeypatch.undo()
    if old == 2:
        without_xxhash(monkeypatch)


# (the older format, its digest, the newer's, the package the newer needs)
UPGRADES = [(3, Digest.BLAKE3, Digest.XXH3, "xxhash"), (2, Digest.SHA256, Digest.BLAKE3, "blake3")]


@pytest.mark.parametrize(("old", "old_digest", "new_digest", "package"), UPGRADES)
def test_a_delta_over_a_base_of_the_older_format_verifies_each_file_with_its_own_hash(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    old: int,
    old_digest: Digest,
    new_digest: Digest,
    package: str,
) -> None:
    older_hash_only(monkeypatch, old)
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    base_state = {"w": floats(3000), "b": floats(3000, seed=5)}
    base = ckpt.save(base_state, 1).wait()
    newer_hash_back(monkeypatch, old)
    changed = {"w": base_state["w"], "b": floats(3000, seed=6)}
    delta = ckpt.save(changed, 2, tier=Tier.EMERGENCY).wait()
    ckpt.close()
    assert (base.format_version, delta.format_version) == (old, old + 1)
    assert {f.digest for f in (*base.files, *delta.files)} == {old_digest, new_digest}
    assert any(ref.file == base.files[0].path for ref in delta.leaves["/w"].chunks)
    got, state = restore(tmp_path)
    assert got.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(state["w"], changed["w"]) and np.array_equal(state["b"], changed["b"])
    pack = tmp_path / base.files[0].path  # damage in the older base is still caught
    damaged = bytearray(pack.read_bytes())
    damaged[10] ^= 0x01
    pack.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointCorrupt, match=f"fails its {old_digest} check"):
        verify(Store(str(tmp_path)), delta)


@pytest.mark.parametrize(("old", "old_digest", "new_digest", "package"), UPGRADES)
def test_without_its_package_a_newer_checkpoint_is_skipped_naming_the_package_to_install(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    old: int,
    old_digest: Digest,
    new_digest: Digest,
    package: str,
) -> None:
    older_hash_only(monkeypatch, old)
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    older = ckpt.save({"w": floats(2000, seed=1)}, 1).wait()
    newer_hash_back(monkeypatch, old)
    newer = ckpt.save({"w": floats(2000, seed=2)}, 2).wait()
    ckpt.close()
    assert (older.format_version, newer.format_version) == (old, old + 1)
    assert {f.digest for f in newer.files} == {new_digest}
    older_hash_only(monkeypatch, old)
    with caplog.at_level(logging.WARNING, logger="spothop.checkpoint"):
        got, state = restore(tmp_path)
    assert got.checkpoint_id == older.checkpoint_id
    assert np.array_equal(state["w"], floats(2000, seed=1))  # type: ignore[arg-type]
    assert f"pip install {package}" in caplog.text


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
