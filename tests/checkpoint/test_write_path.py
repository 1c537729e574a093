"""The local write path: early writeback, GIL-free hashing and the commit's folder fsync.

None of it may change a stored byte: a pack written with writeback kicks is byte-identical to
one written without, and to the format's definition (raw chunks in leaf order, a Merkle root
of their sha256 digests); verification on load still catches a flipped bit.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import Checkpointer, NoValidCheckpoint, Tier
from spothop.checkpoint import store as store_mod
from spothop.checkpoint.manifest import FILE_DIGEST_DOMAIN, Manifest, sha256_digest

CHUNK = 1024
WINDOW = 4096  # a few chunks: every save below kicks writeback several times


def state() -> dict[str, object]:
    rng = np.random.default_rng(7)
    return {"w": rng.standard_normal(5000).astype(np.float32), "b": rng.integers(0, 9, 777, dtype=np.int64),
            "empty": np.zeros(0, dtype=np.float32), "step": 3}


def save_local(root: Path) -> tuple[Manifest, bytes]:
    with Checkpointer(str(root / "durable"), local_url=str(root / "local"), chunk_bytes=CHUNK) as ckpt:
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
    assert offsets[0] == 0 and all(off + n == nxt for (off, n, _), nxt in zip(kicks, offsets[1:], strict=False))
    assert all(n >= WINDOW for _, n, _ in kicks)


def test_pack_is_byte_identical_with_and_without_early_writeback(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
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
    chunks = [expected[int(i):int(i) + size] for i, size in zip(starts, segments, strict=True)]
    assert all(len(c) <= CHUNK for c in chunks)
    root = hashlib.sha256(FILE_DIGEST_DOMAIN)
    for chunk in chunks:
        root.update(hashlib.sha256(chunk).digest())
    assert plain.files[0].sha256 == root.hexdigest()


def test_a_flipped_bit_in_an_early_written_pack_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_mod, "WRITEBACK_WINDOW_BYTES", WINDOW)
    manifest, data = save_local(tmp_path)
    pack = tmp_path / "local" / manifest.files[0].path
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x10
    pack.write_bytes(bytes(damaged))
    with pytest.raises(NoValidCheckpoint):
        Checkpointer(str(tmp_path / "durable"), local_url=str(tmp_path / "local")).restore(apply_rng=False)


def test_the_commit_fsyncs_the_manifest_folder_and_the_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[Path] = []
    real = store_mod._fsync_dir

    def record(path: Path) -> None:
        synced.append(path)
        real(path)

    monkeypatch.setattr(store_mod, "_fsync_dir", record)
    manifest, _ = save_local(tmp_path)
    local = tmp_path / "local"
    assert local / manifest.checkpoint_id in synced and local in synced
