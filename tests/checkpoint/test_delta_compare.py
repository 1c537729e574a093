"""Emergency deltas found by comparing the live state with the host copy kept from the base checkpoint.

Each test pins one way the comparison could keep stale bytes (or hash what it need not): every
restore must equal the live state bit for bit, and the stats say which path was taken.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spothop.checkpoint import Checkpointer, Tier
from spothop.checkpoint import _torch_arrays as ta
from spothop.checkpoint.manifest import Manifest

CHUNK = 400  # bytes: 100 float32 per chunk, so a 1000-element tensor has 10 chunks
ELEMENTS_PER_CHUNK = CHUNK // 4


def _restore(url: Path, **kwargs: Any) -> Any:
    restored = Checkpointer(str(url), **kwargs).restore(apply_rng=False)
    assert restored is not None
    return restored


def _assert_same(restored: Any, live: Any, path: str = "") -> None:
    if isinstance(live, dict):
        assert set(restored) == set(live), path
        for key in live:
            _assert_same(restored[key], live[key], f"{path}/{key}")
    elif isinstance(live, torch.Tensor):
        assert restored.dtype == live.dtype and restored.shape == live.shape, path
        # Bytes, not values: -0.0 == 0.0 and NaN != NaN would hide or invent differences.
        assert (
            ta.as_bytes(restored.contiguous()).tobytes() == ta.as_bytes(live.contiguous()).tobytes()
        ), path
    elif isinstance(live, np.ndarray):
        assert restored.dtype == live.dtype and restored.tobytes() == live.tobytes(), path
    else:
        assert restored == live, path


def test_fused_adamw_updates_are_found_by_comparison_and_restore_exactly(tmp_path: Path) -> None:
    # Fused AdamW writes parameters without bumping version counters; a frozen layer stays equal.
    torch.manual_seed(0)
    frozen, trained = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=0.1, fused=True)

    def step() -> None:
        optimizer.zero_grad()
        trained(frozen(torch.randn(8, 32))).square().mean().backward()
        optimizer.step()

    def state() -> dict[str, Any]:
        return {
            "frozen": frozen.state_dict(),
            "trained": trained.state_dict(),
            "optim": optimizer.state_dict(),
        }

    step()
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)
    ckpt.save(state(), 1).wait()
    before = trained.weight.detach().clone()
    step()
    assert not torch.equal(before, trained.weight)
    handle = ckpt.save(state(), 2, tier=Tier.EMERGENCY)
    handle.wait()
    frozen_chunks = -(-32 * 32 * 4 // CHUNK) + 1  # the frozen weight and bias
    assert handle.stats.chunks_matched >= frozen_chunks  # compared, not hashed
    assert handle.stats.chunks_written > 0
    restored = _restore(tmp_path / "c")
    assert restored.step == 2
    _assert_same(restored.state["frozen"], frozen.state_dict())
    _assert_same(restored.state["trained"], trained.state_dict())
    for index, values in optimizer.state_dict()["state"].items():
        _assert_same(restored.state["optim"]["state"][index], values)


def test_a_chunk_changed_through_data_is_found_and_only_it_is_copied(tmp_path: Path) -> None:
    t = torch.zeros(1000)
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)
    ckpt.save({"t": t}, 1).wait()
    t.data[
        5 * ELEMENTS_PER_CHUNK
    ] = -0.0  # byte-different, float-equal; invisible to the version counter
    handle = ckpt.save({"t": t}, 2, tier=Tier.EMERGENCY)
    handle.wait()
    assert (handle.stats.chunks_written, handle.stats.chunks_matched) == (1, 9)
    assert handle.stats.bytes_copied == CHUNK  # only the changed chunk crossed into the host buffer
    _assert_same(_restore(tmp_path / "c").state["t"], t)


def test_unchanged_nan_chunks_match_and_a_changed_nan_payload_does_not(tmp_path: Path) -> None:
    t = torch.full((1000,), float("nan"))
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)
    ckpt.save({"t": t}, 1).wait()
    t.view(torch.int32)[0] ^= 1  # another NaN: unequal bytes, and NaN != NaN either way
    handle = ckpt.save({"t": t}, 2, tier=Tier.EMERGENCY)
    handle.wait()
    assert (handle.stats.chunks_written, handle.stats.chunks_matched) == (1, 9)
    _assert_same(_restore(tmp_path / "c").state["t"], t)


def test_a_delta_after_an_intervening_local_save_still_has_the_durable_base(tmp_path: Path) -> None:
    t = torch.zeros(1000)
    url, local = tmp_path / "d", tmp_path / "local"
    ckpt = Checkpointer(str(url), local_url=str(local), chunk_bytes=CHUNK)
    durable = ckpt.save({"t": t}, 1)
    durable.wait()
    t[0] = 1.0  # saved by the local snapshot only: the durable base still has 0 here
    ckpt.save({"t": t}, 2, tier=Tier.LOCAL).wait()
    t[500] = 2.0
    handle = ckpt.save({"t": t}, 3, tier=Tier.EMERGENCY)
    manifest = handle.wait()
    assert manifest.parent == durable.checkpoint_id
    # The buffers hold the local save's bytes, not the base's: no comparison, content hashes decide.
    assert handle.stats.chunks_matched == 0 and handle.stats.chunks_written == 2
    restored = _restore(url, local_url=str(tmp_path / "other"))  # the durable chain alone
    assert restored.step == 3
    _assert_same(restored.state["t"], t)


def test_successive_deltas_keep_chunks_an_earlier_delta_overwrote_in_the_buffer(
    tmp_path: Path,
) -> None:
    t = torch.zeros(1000)
    base = t.clone()
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)
    ckpt.save({"t": t}, 1).wait()
    t[0] = 1.0
    first = ckpt.save({"t": t}, 2, tier=Tier.EMERGENCY)
    first.wait()
    assert (first.stats.chunks_written, first.stats.chunks_matched) == (1, 9)
    t[500] = 2.0  # chunk 0 is unchanged since the first delta, yet still differs from the base
    second = ckpt.save({"t": t}, 3, tier=Tier.EMERGENCY)
    second.wait()
    assert (second.stats.chunks_written, second.stats.chunks_matched) == (2, 8)
    _assert_same(_restore(tmp_path / "c").state["t"], t)
    t[0], t[500] = (
        base[0],
        base[500],
    )  # back to the base: hashed (the buffer is dirty there), then reused
    third = ckpt.save({"t": t}, 4, tier=Tier.EMERGENCY)
    third.wait()
    assert (third.stats.chunks_written, third.stats.chunks_matched) == (0, 8)
    assert third.stats.chunks_reused == 10
    _assert_same(_restore(tmp_path / "c").state["t"], t)


def test_a_restarted_process_falls_back_to_hashing_and_is_still_exact(tmp_path: Path) -> None:
    t = torch.randn(1000)
    first = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)
    first.save({"t": t}, 1).wait()
    first.close()
    t.data[123] += 1.0
    restarted = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)  # no host copy of the base
    handle = restarted.save({"t": t}, 2, tier=Tier.EMERGENCY)
    handle.wait()
    assert handle.stats.chunks_matched == 0
    assert (handle.stats.chunks_written, handle.stats.chunks_reused) == (1, 9)
    _assert_same(_restore(tmp_path / "c").state["t"], t)


def test_a_new_dtype_shape_or_leaf_falls_back_to_hashing(tmp_path: Path) -> None:
    state: dict[str, Any] = {
        "same": torch.randn(1000),
        "dtype": torch.randn(1000),
        "shape": torch.randn(1000),
    }
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)
    ckpt.save(state, 1).wait()
    state["dtype"] = state["dtype"].double()
    state["shape"] = state["shape"].reshape(10, 100)
    state["new"] = torch.randn(100)
    state["strided"] = torch.randn(100, 10).t()  # not contiguous: copied whole, never compared
    handle = ckpt.save(state, 2, tier=Tier.EMERGENCY)
    handle.wait()
    assert handle.stats.chunks_matched == 10  # "same" only
    _assert_same(_restore(tmp_path / "c").state, state)


def _pack_and_leaves(url: Path, manifest: Manifest) -> tuple[bytes, str]:
    (entry,) = manifest.files
    leaves = json.dumps(
        {
            k: [
                [
                    c.offset,
                    c.stored_bytes,
                    c.raw_bytes,
                    c.sha256,
                    c.codec.value,
                    c.file == entry.path,
                ]
                for c in v.chunks
            ]
            for k, v in manifest.leaves.items()
        }
    )
    return (url / entry.path).read_bytes(), leaves


def test_comparison_and_hashing_write_byte_identical_deltas(tmp_path: Path) -> None:
    torch.manual_seed(1)
    state: dict[str, Any] = {
        "w": torch.randn(3000),
        "zeros": torch.zeros(2000),
        "bf": torch.randn(700).to(torch.bfloat16),
        "np": np.random.default_rng(0).standard_normal(900),
        "ints": np.arange(1500, dtype=np.int64),
        "step": 7,
    }
    url = tmp_path / "c"
    comparing = Checkpointer(str(url), chunk_bytes=CHUNK, keep_chains=5)
    comparing.save(state, 1).wait()
    state["w"][1000] = 5.0
    state["zeros"][1999] = 1.0  # a compressible chunk (zstd at the emergency level)
    state["bf"][0] = 3.0
    state["np"][0] = 9.0
    state["ints"][-1] = -1  # the last, shorter chunk
    compared = comparing.save(state, 2, tier=Tier.EMERGENCY)
    compared_manifest = compared.wait()
    assert compared.stats.chunks_matched > 0
    hashing = Checkpointer(
        str(url), chunk_bytes=CHUNK, keep_chains=5
    )  # no retained copy: hashes everything
    hashed = hashing.save(state, 2, tier=Tier.EMERGENCY)
    hashed_manifest = hashed.wait()
    assert hashed.stats.chunks_matched == 0
    assert compared_manifest.parent == hashed_manifest.parent
    assert (compared.stats.chunks_written, compared.stats.chunks_reused) == (
        hashed.stats.chunks_written,
        hashed.stats.chunks_reused,
    )
    assert _pack_and_leaves(url, compared_manifest) == _pack_and_leaves(url, hashed_manifest)
    _assert_same(_restore(url).state, state)


def test_without_retained_buffers_deltas_hash_everything(tmp_path: Path) -> None:
    t = torch.randn(1000)
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK, reuse_host_buffers=False)
    ckpt.save({"t": t}, 1).wait()
    t[0] += 1
    handle = ckpt.save({"t": t}, 2, tier=Tier.EMERGENCY)
    handle.wait()
    assert handle.stats.chunks_matched == 0 and handle.stats.chunks_written == 1
    _assert_same(_restore(tmp_path / "c").state["t"], t)


def test_the_device_comparison_finds_changed_chunks_in_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Device-agnostic torch code: on CPU tensors here, on CUDA in production.
    monkeypatch.setattr(
        ta, "DEVICE_STAGING_BYTES", 3 * CHUNK
    )  # several batches, one chunk-aligned tail
    live = torch.randn(1050)  # 10 full chunks and a 200-byte tail
    host = live.clone()
    live[150] = 0.5  # chunk 1
    live[1049] = 0.5  # the tail chunk
    check = [True] * 11
    check[7] = False  # dirty: counts as changed without looking
    changed = ta.compare_on_device(live, host, CHUNK, check)
    assert changed == [i in (1, 7, 10) for i in range(11)]
    ta.copy_chunks_from_device(live, host, CHUNK, [1, 7, 10])
    assert torch.equal(live, host)
    assert (
        ta.compare_on_device(live.reshape(30, 35).t(), host, CHUNK, check) is None
    )  # not contiguous


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_are_compared_on_the_device(tmp_path: Path) -> None:
    t = torch.randn(1000, device="cuda")
    ckpt = Checkpointer(str(tmp_path / "c"), chunk_bytes=CHUNK)
    ckpt.save({"t": t}, 1).wait()
    t.data[5 * ELEMENTS_PER_CHUNK] += 1.0
    handle = ckpt.save({"t": t}, 2, tier=Tier.EMERGENCY)
    handle.wait()
    assert (handle.stats.chunks_written, handle.stats.chunks_matched) == (1, 9)
    assert handle.stats.bytes_copied == CHUNK
    restored = _restore(tmp_path / "c")
    assert torch.equal(restored.state["t"], t.cpu())
