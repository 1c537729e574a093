"""A save's host copy streamed into its write: the writer follows the copy leaf by leaf, save()
still returns only once the state is copied, and a failed copy commits nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from spothop.checkpoint import Checkpointer, Tier
from spothop.checkpoint import snapshot as snapshot_mod
from spothop.checkpoint.reader import committed
from spothop.checkpoint.store import Store

CHUNK = 4096


def state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {f"layer{i}": torch.randn(3000, generator=gen) for i in range(6)}


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """One leaf per step, so the writer really waits for the copy between leaves."""
    monkeypatch.setattr(snapshot_mod, "STREAM_STEP_BYTES", 1)


@pytest.mark.usefixtures("small_steps")
@pytest.mark.parametrize("tier", [Tier.LOCAL, Tier.DURABLE])
def test_changes_made_right_after_save_returns_are_not_in_the_checkpoint(
    tmp_path: Path, tier: Tier
) -> None:
    live = state()
    expected = {key: tensor.clone() for key, tensor in live.items()}
    ckpt = Checkpointer(str(tmp_path / "d"), local_url=str(tmp_path / "l"), chunk_bytes=CHUNK)
    for step in (1, 2):  # the second save copies into the buffers the first one kept
        handle = ckpt.save(live, step, tier=tier)
        with torch.no_grad():  # the training step that follows save()
            for tensor in live.values():
                tensor.add_(1000.0)
        handle.wait()
        assert handle.stats.bytes_copied == sum(t.numel() * 4 for t in live.values())
        restored = Checkpointer(str(tmp_path / "d"), local_url=str(tmp_path / "l")).restore(
            apply_rng=False
        )
        assert restored is not None and restored.step == step
        assert all(torch.equal(restored.state[k], expected[k]) for k in live)
        expected = {key: tensor.clone() for key, tensor in live.items()}
    ckpt.close()


@pytest.mark.usefixtures("small_steps")
def test_a_failed_streamed_copy_raises_from_save_and_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = Checkpointer(str(tmp_path / "d"), local_url=str(tmp_path / "l"), chunk_bytes=CHUNK)
    ckpt.save(state(), 1).wait()  # buffers kept: the next save streams into them
    assert ckpt._buffers is not None and ckpt._buffers.get("/layer0") is not None
    real_copy = snapshot_mod.bulk.copy
    calls = 0

    def failing_copy(pairs: list[tuple[object, object]]) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            raise MemoryError("host copy failed")
        real_copy(pairs)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot_mod.bulk, "copy", failing_copy)
    with pytest.raises(MemoryError, match="host copy failed"):
        ckpt.save(state(), 2)
    monkeypatch.undo()
    assert ckpt._buffers is not None and ckpt._buffers.get("/layer0") is None  # none trusted
    ckpt.wait()
    steps = [m.step for m in committed(Store(str(tmp_path / "d")))[0]]
    assert steps == [1]
    assert not any("000000000002" in p.name for p in (tmp_path / "d").iterdir())
    assert ckpt.save(state(), 3).wait().step == 3  # the checkpointer goes on
    ckpt.close()
