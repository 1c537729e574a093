"""Garbage collection keeps what restores: chains are ranked by their newest checkpoint that verifies."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spothop.checkpoint import Checkpointer, collect, list_checkpoints
from spothop.checkpoint.gc import plan_collection
from spothop.checkpoint.store import Store


def chains(root: Path, steps: tuple[int, ...] = (10, 20)) -> dict[int, str]:
    """One chain per step: a full checkpoint at ``step`` and a delta at ``step + 1``; ids by step."""
    ckpt = Checkpointer(str(root), keep_chains=100, chunk_bytes=256)
    ids: dict[int, str] = {}
    for step in steps:
        weights = np.full(200, step, dtype=np.float64)
        ids[step] = ckpt.save({"w": weights}, step).wait().checkpoint_id
        weights[0] = -1.0  # the delta stores one chunk and reads the rest from its parent
        ids[step + 1] = ckpt.save({"w": weights}, step + 1, tier="emergency").wait().checkpoint_id
    ckpt.close()
    return ids


def truncate_pack(root: Path, checkpoint_id: str) -> None:
    pack = next((root / checkpoint_id).glob("*.pack"))
    pack.write_bytes(pack.read_bytes()[:-7])


def restored_step(root: Path) -> int:
    restored = Checkpointer(str(root)).restore(apply_rng=False)
    assert restored is not None
    return restored.step


@pytest.mark.parametrize(
    "damage", ["truncate the parent's pack file", "delete the parent's manifest"]
)
def test_gc_keeps_the_chain_that_restores_when_the_newest_chain_is_damaged(
    tmp_path: Path, damage: str
) -> None:
    ids = chains(tmp_path)
    if damage.startswith("truncate"):
        truncate_pack(tmp_path, ids[20])
    else:
        (tmp_path / ids[20] / "MANIFEST.json").unlink()
    assert restored_step(tmp_path) == 11  # before gc, the restore falls back to the older chain

    plan = collect(Store(str(tmp_path)), 1)

    assert restored_step(tmp_path) == 11  # and after it too
    assert plan.deleted == [] and plan.newest_restorable == ids[11]
    assert {ids[10], ids[11]} <= set(plan.kept)
    assert ids[21] in {cid for cid, _ in plan.damaged}
    assert (tmp_path / ids[10] / "MANIFEST.json").is_file()


def test_a_damaged_chain_does_not_count_towards_keep(tmp_path: Path) -> None:
    ids = chains(tmp_path, (10, 20, 30))
    truncate_pack(tmp_path, ids[30])
    plan = collect(Store(str(tmp_path)), 1)
    assert plan.deleted == [ids[11], ids[10]]  # chain 20 restores, so the older chain 10 can go
    assert plan.newest_restorable == ids[21]
    assert {ids[30], ids[31]} == {cid for cid, _ in plan.damaged}
    assert restored_step(tmp_path) == 21


def test_the_newest_restorable_checkpoint_is_kept_even_in_an_older_chain_than_a_damaged_delta(
    tmp_path: Path,
) -> None:
    ids = chains(tmp_path, (10, 20))
    truncate_pack(tmp_path, ids[21])  # the delta's own file: its parent (step 20) still restores
    plan = collect(Store(str(tmp_path)), 1)
    assert plan.newest_restorable == ids[20]
    assert plan.deleted == [ids[11], ids[10]]
    assert [cid for cid, _ in plan.damaged] == [ids[21]]
    assert restored_step(tmp_path) == 20


def test_nothing_is_deleted_while_fewer_chains_than_keep_restore(tmp_path: Path) -> None:
    ids = chains(tmp_path, (10, 20, 30))
    truncate_pack(tmp_path, ids[20])
    truncate_pack(tmp_path, ids[30])
    plan = collect(Store(str(tmp_path)), 2)
    assert plan.deleted == [] and plan.newest_restorable == ids[11]
    assert len(list_checkpoints(str(tmp_path))) == 6


def test_a_dry_run_shows_the_plan_that_is_then_carried_out(tmp_path: Path) -> None:
    ids = chains(tmp_path, (10, 20, 30))
    truncate_pack(tmp_path, ids[30])
    dry = collect(Store(str(tmp_path)), 1, dry_run=True)
    assert dry == plan_collection(Store(str(tmp_path)), 1)
    assert len(list_checkpoints(str(tmp_path))) == 6  # a dry run deletes nothing
    done = collect(Store(str(tmp_path)), 1)
    assert done == dry
    left = {i.checkpoint_id for i in list_checkpoints(str(tmp_path))}
    assert left == set(ids.values()) - set(dry.deleted)


def test_the_quick_check_reads_sizes_not_bytes(tmp_path: Path) -> None:
    ids = chains(tmp_path, (10, 20))
    pack = next((tmp_path / ids[20]).glob("*.pack"))
    data = bytearray(pack.read_bytes())
    data[-1] ^= 0xFF  # same size, one flipped bit: only reading the bytes finds it
    pack.write_bytes(bytes(data))
    quick = plan_collection(Store(str(tmp_path)), 1, verify_bytes=False)
    assert quick.newest_restorable == ids[21] and quick.deleted == [ids[11], ids[10]]
    full = plan_collection(Store(str(tmp_path)), 1)
    assert full.newest_restorable == ids[11] and full.deleted == []


def test_automatic_gc_after_a_save_keeps_it_when_a_newer_chain_is_damaged(tmp_path: Path) -> None:
    ids = chains(tmp_path, (10, 20))
    truncate_pack(tmp_path, ids[20])
    ckpt = Checkpointer(str(tmp_path), keep_chains=1, chunk_bytes=256)
    saved = ckpt.save({"w": np.ones(200)}, 12).wait().checkpoint_id  # training went on from step 11
    ckpt.close()  # after its clean-up
    left = {i.checkpoint_id for i in list_checkpoints(str(tmp_path))}
    assert left == {
        saved,
        ids[20],
        ids[21],
    }  # chain 10 went; the damaged chain 20 waits for inspection
    assert restored_step(tmp_path) == 12


def test_ckpt_gc_dry_run_and_run_agree_through_the_cli(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    ids = chains(tmp_path, (10, 20, 30))
    truncate_pack(tmp_path, ids[30])
    dry = cli("ckpt", "gc", str(tmp_path), "--keep", "1", "--dry-run", "--json")
    assert dry.code == 0, dry.err
    run = cli("ckpt", "gc", str(tmp_path), "--keep", "1", "--json")
    assert run.code == 0, run.err
    assert {**dry.json(), "dry_run": False} == run.json()
    assert run.json()["deleted"] == [ids[11], ids[10]]
    table = cli("ckpt", "gc", str(tmp_path), "--keep", "1")
    assert "damaged" in table.out and ids[31] in table.out
