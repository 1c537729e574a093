"""A synchronous full save writes straight from the caller's arrays (``save(sync=True)``).

No host copy is made, yet the pack file and the manifest must be byte for byte what the copying
path writes for the same state, every tier; the kept buffers (what emergency deltas compare
against) must be left as they were, and every delta after such a save must restore exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spothop.checkpoint import CheckpointConfigError, Checkpointer, Tier
from spothop.checkpoint import _torch_arrays as ta
from spothop.checkpoint.manifest import Manifest

CHUNK = 400  # bytes: several chunks per leaf, and a shorter last one


def _state() -> dict[str, Any]:
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    return {
        "w": torch.randn(3000),
        "zeros": torch.zeros(2000),  # compressible: zstd on the durable tier
        "bf": torch.randn(701).to(torch.bfloat16),
        "strided": torch.randn(40, 30).t(),  # not contiguous: copied as before
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0),
        "np": rng.standard_normal(900),
        "np_f": np.asfortranarray(rng.standard_normal((30, 20))),  # not C-contiguous: copied
        "ints": np.arange(1501, dtype=np.int64),
        "np_empty": np.zeros((0, 3), dtype=np.float32),
        "nested": {"b": rng.integers(0, 9, 77, dtype=np.int16)},
        "step": 7,
    }


def _normalised(root: Path, manifest: Manifest) -> tuple[bytes, str]:
    """The pack file's bytes and the manifest as stored, its id and time (and so its own hash) out."""
    (entry,) = manifest.files
    data = json.loads((root / manifest.checkpoint_id / "MANIFEST.json").read_text())
    data.pop("sha256")
    data["manifest"].pop("wall_time_unix_s")
    text = json.dumps(data, sort_keys=True).replace(manifest.checkpoint_id, "ID")
    return (root / entry.path).read_bytes(), text


def _assert_same(restored: Any, live: Any) -> None:
    if isinstance(live, dict):
        assert set(restored) == set(live)
        for key in live:
            _assert_same(restored[key], live[key])
    elif isinstance(live, torch.Tensor):
        assert restored.dtype == live.dtype and restored.shape == live.shape
        assert ta.as_bytes(restored.contiguous()).tobytes() == (
            ta.as_bytes(live.contiguous()).tobytes()
        )
    elif isinstance(live, np.ndarray):
        assert restored.dtype == live.dtype and restored.shape == live.shape
        assert restored.tobytes() == live.tobytes()
    else:
        assert restored == live


@pytest.mark.parametrize("tier", [Tier.LOCAL, Tier.DURABLE])
@pytest.mark.parametrize("reuse_host_buffers", [True, False])
def test_a_save_from_the_arrays_writes_the_same_pack_and_manifest_as_the_copying_one(
    tmp_path: Path, tier: Tier, reuse_host_buffers: bool
) -> None:
    state = _state()
    written: list[tuple[bytes, str]] = []
    for sync in (False, True):
        root = tmp_path / f"sync-{sync}"
        store = root / ("local" if tier is Tier.LOCAL else "durable")
        with Checkpointer(
            str(root / "durable"),
            local_url=str(root / "local"),
            chunk_bytes=CHUNK,
            reuse_host_buffers=reuse_host_buffers,
        ) as ckpt:
            handle = ckpt.save(state, 5, tier=tier, sync=sync)
            assert handle.done() or not sync  # sync: committed before save() returned
            manifest = handle.wait()
            copied = handle.stats.bytes_copied
        # Only the strided tensor and the Fortran-ordered array are copied from the arrays.
        both = state["strided"].numel() * 4 + state["np_f"].nbytes
        assert copied == both if sync else copied > both
        written.append(_normalised(store, manifest))
        restored = Checkpointer(str(root / "durable"), local_url=str(root / "local")).restore(
            apply_rng=False
        )
        assert restored is not None
        _assert_same(restored.state, state)
    assert written[0] == written[1]


def test_a_sync_local_save_leaves_the_durable_base_comparable(tmp_path: Path) -> None:
    """The kept buffers still hold the durable base after a sync local save (the copying one
    overwrites them with the local save's bytes), so the delta compares instead of hashing."""
    t = torch.zeros(1000)
    url = tmp_path / "d"
    ckpt = Checkpointer(str(url), local_url=str(tmp_path / "local"), chunk_bytes=CHUNK)
    durable = ckpt.save({"t": t}, 1)
    durable.wait()
    t[0] = 1.0
    ckpt.save({"t": t}, 2, tier=Tier.LOCAL, sync=True)
    t[500] = 2.0
    handle = ckpt.save({"t": t}, 3, tier=Tier.EMERGENCY, sync=True)
    assert handle.wait().parent == durable.checkpoint_id
    assert (handle.stats.chunks_written, handle.stats.chunks_matched) == (2, 8)
    restored = Checkpointer(str(url), local_url=str(tmp_path / "other")).restore(apply_rng=False)
    assert restored is not None and restored.step == 3
    _assert_same(restored.state["t"], t)


def test_a_delta_after_a_sync_durable_save_hashes_and_restores_exactly(tmp_path: Path) -> None:
    """A sync durable save is the next delta's base, but the buffers do not hold its bytes: the delta
    must not compare with them (they hold the previous save), it hashes and reuses by content."""
    t = torch.zeros(1000)
    a = np.zeros(500)
    url = tmp_path / "d"
    ckpt = Checkpointer(str(url), local_url=str(tmp_path / "local"), chunk_bytes=CHUNK)
    ckpt.save({"t": t, "a": a}, 1).wait()  # copying: the buffers hold this one
    t[100] = 1.0
    a[0] = 4.0
    durable = ckpt.save({"t": t, "a": a}, 2, sync=True)
    t[900] = 3.0
    handle = ckpt.save({"t": t, "a": a}, 3, tier=Tier.EMERGENCY)
    assert handle.wait().parent == durable.checkpoint_id
    assert handle.stats.chunks_matched == 0
    assert handle.stats.chunks_written == 1  # the rest found equal to the base by content hash
    restored = Checkpointer(str(url), local_url=str(tmp_path / "other")).restore(apply_rng=False)
    assert restored is not None and restored.step == 3
    _assert_same(restored.state, {"t": t, "a": a})
    # The delta refilled the buffers from the live state: the next delta against the same base
    # must still see every change since that base, not since the delta.
    t[0] = 7.0
    again = ckpt.save({"t": t, "a": a}, 4, tier=Tier.EMERGENCY)
    assert again.wait().parent == durable.checkpoint_id
    restored = Checkpointer(str(url), local_url=str(tmp_path / "other2")).restore(apply_rng=False)
    assert restored is not None and restored.step == 4
    _assert_same(restored.state, {"t": t, "a": a})


def test_a_save_cannot_be_both_sync_and_overlapped(tmp_path: Path) -> None:
    with (
        Checkpointer(str(tmp_path / "d"), local_url=str(tmp_path / "l")) as ckpt,
        pytest.raises(CheckpointConfigError),
    ):
        ckpt.save({"t": torch.zeros(3)}, 1, sync=True, overlap=True)


def test_torch_state_saves_synchronously_and_restores_model_and_optimizer(tmp_path: Path) -> None:
    from spothop.checkpoint.pytorch import TorchState

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 3)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 8)).sum().backward()
    optimizer.step()  # Adam's moments exist now
    ckpt = Checkpointer(str(tmp_path / "c"), local_url=str(tmp_path / "l"))
    handle = TorchState(model, optimizer).save(ckpt, 1, sync=True)
    assert handle.done() and handle.stats.bytes_copied == 0
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    moments = [s["exp_avg"].clone() for s in optimizer.state.values()]
    fresh = torch.nn.Linear(8, 3)
    fresh_optimizer = torch.optim.Adam(fresh.parameters())
    assert TorchState(fresh, fresh_optimizer).restore(ckpt) == 1
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, saved[key])
    restored = [s["exp_avg"] for s in fresh_optimizer.state.values()]
    assert all(torch.equal(a, b) for a, b in zip(restored, moments, strict=True))
