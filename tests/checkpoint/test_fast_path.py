"""The fast save/restore path: adaptive compression, one hash per byte, parallel work, reused host buffers."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path

import blake3
import numpy as np
import pytest
import torch
import xxhash

from spothop.checkpoint import CheckpointCorrupt, Checkpointer, Tier
from spothop.checkpoint.manifest import FORMAT_VERSION, Codec, Digest, _digest, manifest_from_json
from spothop.checkpoint.pack import HostLeaf, encode_chunk, worth_compressing, write_pack
from spothop.checkpoint.reader import ancestors, load_manifest, read_leaves, verify
from spothop.checkpoint.store import Store

CHUNK = 1024


def floats(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_adaptive_compression_stores_float_weights_raw_and_compresses_zeros() -> None:
    weights = memoryview(floats(64 * 1024).view(np.uint8))
    zeros = memoryview(np.zeros(256 * 1024, dtype=np.uint8))
    assert not worth_compressing(weights, 3, 0.9)
    assert worth_compressing(zeros, 3, 0.9)
    assert encode_chunk(weights, None, 3).codec is Codec.RAW
    packed = encode_chunk(zeros, None, 1)
    assert packed.codec is Codec.ZSTD and len(packed.payload) < len(zeros) // 100


@pytest.mark.parametrize(
    ("digest", "reference"),
    [
        (Digest.XXH3, lambda b: xxhash.xxh3_128(b).hexdigest()),
        (Digest.BLAKE3, lambda b: blake3.blake3(b).hexdigest()),
        (Digest.SHA256, lambda b: hashlib.sha256(b).hexdigest()),
    ],
)
def test_a_raw_chunk_is_hashed_once_its_digest_serving_both_roles(
    digest: Digest, reference: Callable[[bytes], str]
) -> None:
    data = memoryview(floats(4096).view(np.uint8))
    done = encode_chunk(data, None, None, digest=digest)
    assert done.sha256 == reference(bytes(data)) and done.stored_digest.hex() == done.sha256


def _leaves() -> list[HostLeaf]:
    arrays = {
        "a": floats(5000),
        "z": np.zeros(3000, dtype=np.float32),
        "e": np.zeros(0, dtype=np.float32),
        "b": floats(777, seed=1),
    }
    return [
        HostLeaf(k, "numpy", v.dtype.str, v.shape, v.reshape(-1).view(np.uint8), owner=v)
        for k, v in arrays.items()
    ]


def test_parallel_save_writes_byte_identical_files_to_serial(tmp_path: Path) -> None:
    results = []
    for workers in (1, 4):
        store = Store(str(tmp_path / f"w{workers}"))
        results.append(
            write_pack(
                store,
                "c/data.pack",
                _leaves(),
                parent=None,
                level=3,
                chunk_bytes=CHUNK,
                workers=workers,
                cancel=threading.Event(),
            )
        )
    serial, parallel = results
    assert (tmp_path / "w1/c/data.pack").read_bytes() == (tmp_path / "w4/c/data.pack").read_bytes()
    assert serial.file == parallel.file and serial.leaves == parallel.leaves
    codecs = {c.codec for leaf in serial.leaves.values() for c in leaf.chunks}
    assert codecs == {Codec.RAW, Codec.ZSTD}  # floats raw, zeros compressed, in one file


def test_the_file_digest_catches_one_flipped_bit_in_any_chunk(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, zstd_levels={Tier.DURABLE: 3})
    state = {"w": floats(2000), "z": np.zeros(2000, dtype=np.float32)}
    manifest = ckpt.save(state, 1).wait()
    ckpt.close()
    assert manifest.format_version == FORMAT_VERSION == 4
    (entry,) = manifest.files
    assert entry.segments is not None and len(entry.segments) > 4
    store, path = Store(str(tmp_path)), tmp_path / entry.path
    pristine = path.read_bytes()
    offset = 0
    for length in entry.segments:  # one flipped bit in each segment, raw and compressed alike
        damaged = bytearray(pristine)
        damaged[offset + length // 2] ^= 0x04
        path.write_bytes(bytes(damaged))
        with pytest.raises(CheckpointCorrupt, match=r"fails its xxh3-128 check|decompress|decodes"):
            verify(store, manifest)
        with pytest.raises(CheckpointCorrupt):
            read_leaves(store, manifest, ancestors(store, manifest))
        offset += length
    path.write_bytes(pristine + b"x")
    with pytest.raises(CheckpointCorrupt, match="more bytes"):
        verify(store, manifest)
    path.write_bytes(pristine)
    verify(store, manifest)


def test_segments_that_do_not_tile_the_file_are_a_malformed_manifest(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK)
    cid = ckpt.save({"w": floats(1000)}, 1).wait().checkpoint_id
    text = (tmp_path / cid / "MANIFEST.json").read_text()
    outer = json.loads(text)
    outer["manifest"]["files"][0][3][0] += 1
    outer["sha256"] = _digest(outer["manifest"])
    with pytest.raises(CheckpointCorrupt, match="malformed"):
        manifest_from_json(json.dumps(outer), cid)


def _downgrade_to_format_1(root: Path, cid: str) -> None:
    """Rewrite a checkpoint's manifest as format 1 wrote it: a whole-file sha256 and no segments."""
    path = root / cid / "MANIFEST.json"
    outer = json.loads(path.read_text())
    body = outer["manifest"]
    body["format_version"] = 1
    body["files"] = [
        [p, hashlib.sha256((root / p).read_bytes()).hexdigest(), size]
        for p, _, size, _ in body["files"]
    ]
    outer["sha256"] = _digest(body)
    path.write_text(json.dumps(outer))


def test_format_1_checkpoints_still_load_and_still_verify(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=CHUNK, keep_chains=5)
    full_state = {"w": floats(3000), "z": np.zeros(500, dtype=np.float32), "step": 1}
    full = ckpt.save(full_state, 1).wait()
    delta_state = {"w": full_state["w"].copy(), "z": np.ones(500, dtype=np.float32), "step": 2}
    delta = ckpt.save(delta_state, 2, tier=Tier.EMERGENCY).wait()
    ckpt.close()
    for cid in (full.checkpoint_id, delta.checkpoint_id):
        _downgrade_to_format_1(tmp_path, cid)
    store = Store(str(tmp_path))
    old = load_manifest(store, delta.checkpoint_id)
    assert old.format_version == 1 and all(f.segments is None for f in old.files)
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert restored is not None and restored.manifest.checkpoint_id == delta.checkpoint_id
    assert np.array_equal(restored.state["w"], delta_state["w"]) and np.all(
        restored.state["z"] == 1
    )
    pack = tmp_path / full.files[0].path
    raw = bytearray(pack.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    pack.write_bytes(bytes(raw))
    with pytest.raises(CheckpointCorrupt):
        verify(store, old)


def test_host_buffers_are_reused_between_saves_and_hold_the_new_values(tmp_path: Path) -> None:
    weight = torch.randn(10_000)
    ckpt = Checkpointer(str(tmp_path), local_url=str(tmp_path / "local"), keep_chains=5)
    ckpt.save({"w": weight, "n": np.arange(5)}, 1).wait()
    assert ckpt._buffers is not None
    first = ckpt._buffers.get("/w")
    assert first is not None
    buffer = first.host
    with torch.no_grad():
        weight.add_(1)
    second = ckpt.save({"w": weight, "n": np.arange(5) * 2}, 2)
    assert (
        second.stats.bytes_copied == weight.numel() * 4 + 5 * 8
    )  # reused, but copied: no skipping by default
    held = ckpt._buffers.get("/w")
    assert held is not None and held.host is buffer
    restored = Checkpointer(str(tmp_path), local_url=str(tmp_path / "local")).restore(
        apply_rng=False
    )
    assert restored is not None and restored.step == 2
    assert torch.equal(restored.state["w"], weight) and list(restored.state["n"]) == [0, 2, 4, 6, 8]


def test_skip_unchanged_copies_only_changed_tensors_and_is_not_fooled_by_address_reuse(
    tmp_path: Path,
) -> None:
    frozen, trained = torch.randn(50_000), torch.randn(1000)
    ckpt = Checkpointer(
        str(tmp_path), local_url=str(tmp_path / "local"), skip_unchanged=True, keep_local=5
    )
    for step in range(1, 4):
        with torch.no_grad():
            trained.add_(1)
        # A scalar rebuilt every save: the allocator may hand it the freed one's address.
        handle = ckpt.save(
            {"frozen": frozen, "trained": trained, "lr": torch.tensor(float(step))},
            step,
            tier=Tier.LOCAL,
        )
        handle.wait()
        if step > 1:
            assert (
                handle.stats.bytes_copied < frozen.numel() * 4
            )  # the frozen tensor was not copied
    restored = Checkpointer(str(tmp_path / "none"), local_url=str(tmp_path / "local")).restore(
        apply_rng=False
    )
    assert restored is not None and restored.step == 3
    assert torch.equal(restored.state["frozen"], frozen) and torch.equal(
        restored.state["trained"], trained
    )
    assert restored.state["lr"].item() == 3.0


def test_without_buffer_reuse_nothing_stays_resident(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), reuse_host_buffers=False)
    ckpt.save({"w": torch.randn(100)}, 1).wait()
    assert ckpt._buffers is None


def test_prepare_allocates_the_buffers_the_first_save_fills(tmp_path: Path) -> None:
    """The buffers come into being before the first save, the save copies into those very buffers, and
    their zeros never reach a checkpoint: not the full save, nor a delta compared against it."""
    weight, bias, counts = torch.randn(3000, 7), torch.randn(7).to(torch.bfloat16), np.arange(9)
    state = {"w": weight, "b": bias, "n": counts, "lr": 0.1}
    ckpt = Checkpointer(
        str(tmp_path), local_url=str(tmp_path / "local"), keep_chains=5, chunk_bytes=4096
    )
    assert ckpt.prepare(state).result() == weight.numel() * 4 + bias.numel() * 2 + counts.nbytes
    assert ckpt._buffers is not None
    prepared = {key: ckpt._buffers.get(key) for key in ("/w", "/b", "/n")}
    assert all(held is not None and held.saved_as is None for held in prepared.values())
    assert ckpt.prepare(state).result() == 0  # everything already fits
    first = ckpt.save(state, 1)
    first.wait()
    assert all(ckpt._buffers.get(key).host is held.host for key, held in prepared.items())  # type: ignore[union-attr]
    with torch.no_grad():
        weight[5].add_(1)
    delta = ckpt.save(state, 2, tier=Tier.EMERGENCY)
    assert delta.stats.chunks_matched > 0  # compared with the prepared-then-filled buffers
    restored = Checkpointer(str(tmp_path), local_url=str(tmp_path / "none")).restore(
        apply_rng=False
    )
    assert restored is not None and restored.step == 2
    assert torch.equal(restored.state["w"], weight) and torch.equal(restored.state["b"], bias)
    assert list(restored.state["n"]) == list(counts)


def test_prepare_does_nothing_without_kept_buffers(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), reuse_host_buffers=False)
    assert ckpt.prepare({"w": torch.randn(100)}).result() == 0
    assert ckpt.save({"w": torch.randn(100)}, 1).wait().step == 1
