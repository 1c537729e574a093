"""A folder where a manifest or a pack file belongs is a damaged checkpoint: skipped, never a crash."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import Checkpointer, collect, list_checkpoints, verify_checkpoints
from spothop.checkpoint.store import Store


def two_checkpoints(root: Path) -> tuple[str, str]:
    ckpt = Checkpointer(str(root), keep_chains=10)
    old = ckpt.save({"w": np.arange(64.0)}, 1).wait().checkpoint_id
    new = ckpt.save({"w": np.arange(64.0) * 2}, 2).wait().checkpoint_id
    ckpt.close()
    return old, new


def replace_with_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside").write_text("not a checkpoint file")


@pytest.mark.parametrize("victim", ["MANIFEST.json", "a pack file"])
def test_restore_falls_back_past_a_folder_where_a_file_belongs(tmp_path: Path, victim: str) -> None:
    old, new = two_checkpoints(tmp_path)
    target = (
        tmp_path / new / "MANIFEST.json"
        if victim == "MANIFEST.json"
        else next((tmp_path / new).glob("*.pack"))
    )
    replace_with_folder(target)
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert restored is not None and restored.manifest.checkpoint_id == old
    assert np.array_equal(restored.state["w"], np.arange(64.0))
    results = {r.checkpoint_id: r for r in verify_checkpoints(str(tmp_path))}
    assert results[old].ok and not results[new].ok
    assert "folder" in (results[new].reason or "")
    statuses = {i.checkpoint_id: i.status for i in list_checkpoints(str(tmp_path))}
    assert statuses[old] == "committed"


@pytest.mark.parametrize("verify_bytes", [True, False])
def test_gc_counts_a_checkpoint_with_a_folder_for_a_pack_file_as_damaged(
    tmp_path: Path, verify_bytes: bool
) -> None:
    old, new = two_checkpoints(tmp_path)
    replace_with_folder(next((tmp_path / new).glob("*.pack")))
    plan = collect(Store(str(tmp_path)), 1, verify_bytes=verify_bytes)
    assert plan.newest_restorable == old and plan.deleted == []
    assert "folder" in dict(plan.damaged)[new]


def test_a_checkpoint_folder_that_is_a_file_is_skipped(tmp_path: Path) -> None:
    old, new = two_checkpoints(tmp_path)
    shutil.rmtree(tmp_path / new)
    (tmp_path / new).write_text("a file where a checkpoint folder was")
    restored = Checkpointer(str(tmp_path)).restore(apply_rng=False)
    assert restored is not None and restored.manifest.checkpoint_id == old
