"""Re-sharding without processes: ranks written by several Checkpointers in one process (NumPy and
torch leaves), restored by Checkpointers of another world size; the rules and the refusals."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spothop.checkpoint import (
    CheckpointConfigError,
    Checkpointer,
    FixedInterval,
    ReshardError,
    Shard,
    ShardRule,
    WorldLayout,
)
from spothop.checkpoint.pytorch import DistributedResumableSampler
from spothop.checkpoint.reshard import candidates, derived_seed, new_range
from spothop.errors import EXIT_NOT_FOUND

ROWS = 10  # rows of the sharded leaf over the whole world


def _checkpointer(url: Path, world: int, rank: int) -> Checkpointer:
    return Checkpointer(
        str(url),
        local_url=f"{url}-local",
        world=WorldLayout(world_size=world, rank=rank),
        interval=FixedInterval(1e9),
    )


def _whole() -> np.ndarray[Any, Any]:
    return np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3)


def _save_world(
    url: Path,
    world: int,
    step: int,
    shard: Shard,
    *,
    replicated: Any = None,
    position: dict[str, Any] | None = None,
) -> None:
    """Each rank saves its rows of the whole leaf (by ``shard``'s rule) and the same replicated leaf."""
    whole = _whole()
    for rank in range(world):
        start, stop = new_range(shard, ROWS, world, rank, "rows")
        part = np.zeros((stop - start, 3), dtype=np.float32)
        real = whole[start : min(stop, ROWS)]
        part[: len(real)] = real
        state = {
            "rows": part,
            "weights": replicated if replicated is not None else np.ones(4, dtype=np.float64),
            "tensor": torch.arange(6.0),
            "lr": 0.1,
        }
        with _checkpointer(url, world, rank) as ckpt:
            ckpt.save(state, step, data_position=position, sharded={"rows": shard}).wait()


@pytest.mark.parametrize(
    ("rule", "old", "new"),
    [
        (ShardRule.EVEN, 2, 5),
        (ShardRule.EVEN, 5, 1),
        (ShardRule.BALANCED, 2, 3),
        (ShardRule.BALANCED, 3, 4),
        (ShardRule.PADDED, 2, 3),
        (ShardRule.PADDED, 4, 3),
        (ShardRule.PADDED, 3, 1),
    ],
)
def test_sharded_rows_are_concatenated_and_re_split_by_their_rule(
    tmp_path: Path, rule: ShardRule, old: int, new: int
) -> None:
    shard = Shard(rule=rule, length=ROWS if rule is ShardRule.PADDED else None)
    _save_world(tmp_path, old, 7, shard)
    pieces = []
    for rank in range(new):
        with _checkpointer(tmp_path, new, rank) as ckpt:
            restored = ckpt.restore()
        assert restored is not None and restored.step == 7
        assert restored.resharded is not None and restored.resharded.from_world_size == old
        assert restored.resharded.sharded == ("/rows",)
        start, stop = new_range(shard, ROWS, new, rank, "rows")
        rows = restored.state["rows"]
        assert rows.shape == (stop - start, 3)  # this rule's share, padding included
        assert not rows[ROWS - start :].any()  # padding past the true rows is zeros
        pieces.append(rows[: max(0, min(stop, ROWS) - start)])
        np.testing.assert_array_equal(restored.state["weights"], np.ones(4))
        assert torch.equal(restored.state["tensor"], torch.arange(6.0))
        assert restored.state["lr"] == 0.1
    np.testing.assert_array_equal(np.concatenate(pieces), _whole())


def test_an_even_shard_that_does_not_divide_is_refused_naming_leaf_and_sizes(
    tmp_path: Path,
) -> None:
    _save_world(tmp_path, 2, 3, Shard())
    with (
        _checkpointer(tmp_path, 3, 0) as ckpt,
        pytest.raises(ReshardError, match=r"'/rows' has 10 rows along dim 0.*into 3 ranks"),
    ):
        ckpt.restore()


def test_a_leaf_that_differs_per_rank_but_is_not_marked_sharded_is_refused(
    tmp_path: Path,
) -> None:
    for rank in range(2):
        with _checkpointer(tmp_path, 2, rank) as ckpt:
            ckpt.save({"buffer": np.full(3, rank, dtype=np.int64)}, 4).wait()
    with (
        _checkpointer(tmp_path, 1, 0) as ckpt,
        pytest.raises(ReshardError, match=r"'/buffer' differs between old ranks 0 and 1"),
    ):
        ckpt.restore()


def test_ranks_saved_at_different_data_positions_are_refused(tmp_path: Path) -> None:
    for rank in range(2):
        with _checkpointer(tmp_path, 2, rank) as ckpt:
            ckpt.save({"w": np.ones(2)}, 4, data_position={"consumed": 10 + rank}).wait()
    with (
        _checkpointer(tmp_path, 3, 0) as ckpt,
        pytest.raises(ReshardError, match="different data positions"),
    ):
        ckpt.restore()


def test_the_newest_step_wins_whatever_world_wrote_it_and_the_same_world_wins_a_tie(
    tmp_path: Path,
) -> None:
    _save_world(tmp_path, 2, 5, Shard())  # the first world
    _save_world(tmp_path, 1, 8, Shard())  # re-formed to one rank, which saved again
    with _checkpointer(tmp_path, 2, 1) as ckpt:  # back to two ranks
        restored = ckpt.restore()
        assert restored is not None and restored.step == 8
        assert restored.resharded is not None and restored.resharded.from_world_size == 1
    _save_world(tmp_path, 2, 8, Shard())  # the same step, by this world
    with _checkpointer(tmp_path, 2, 1) as ckpt:
        restored = ckpt.restore()
        assert restored is not None and restored.step == 8 and restored.resharded is None
    assert [
        c.world_size for c in candidates(str(tmp_path), f"{tmp_path}-local", WorldLayout(2))
    ] == [1]


def test_a_step_not_every_old_rank_committed_is_no_candidate(tmp_path: Path) -> None:
    _save_world(tmp_path, 2, 5, Shard())
    with _checkpointer(tmp_path, 2, 0) as ckpt:  # rank 1 went before it committed step 9
        ckpt.save({"rows": np.zeros((5, 3), np.float32)}, 9).wait()
    with _checkpointer(tmp_path, 1, 0) as ckpt:
        restored = ckpt.restore()
    assert restored is not None and restored.step == 5


def test_without_reshard_worlds_another_worlds_checkpoint_is_skipped(tmp_path: Path) -> None:
    _save_world(tmp_path, 2, 5, Shard())
    with _checkpointer(tmp_path, 1, 0) as ckpt:
        assert ckpt.restore(reshard_worlds=False) is None


def test_each_new_rank_gets_its_own_reproducible_rng(tmp_path: Path) -> None:
    _save_world(tmp_path, 2, 5, Shard(rule=ShardRule.BALANCED))
    draws = []
    for rank in (0, 1, 2, 0):
        with _checkpointer(tmp_path, 3, rank) as ckpt:
            restored = ckpt.restore()
        assert restored is not None and restored.resharded is not None
        draws.append((random.random(), float(np.random.rand()), float(torch.rand(1))))
        seed = derived_seed(restored.manifest.checkpoint_id, 2, WorldLayout(3, rank))
        assert restored.resharded.rng_seed == seed
    assert draws[0] == draws[3]  # the same re-form restored twice draws the same
    assert len({d[0] for d in draws[:3]}) == 3  # distinct per rank


def test_sharding_patterns_are_checked_when_saving(tmp_path: Path) -> None:
    with _checkpointer(tmp_path, 2, 0) as ckpt:
        with pytest.raises(CheckpointConfigError, match="'optimizer/\\*' matches no array"):
            ckpt.save({"w": np.ones(2)}, 1, sharded={"optimizer/*": Shard()})
        with pytest.raises(CheckpointConfigError, match="padded rule, which needs the true length"):
            ckpt.save({"w": np.ones(2)}, 1, sharded={"w": Shard(rule=ShardRule.PADDED)})
    with pytest.raises(CheckpointConfigError, match="shard rule 'zigzag' is not one of"):
        Shard(rule="zigzag")  # type: ignore[arg-type]


@pytest.mark.parametrize(("old", "new", "taken"), [(2, 3, 5), (3, 1, 4), (1, 4, 7), (4, 2, 0)])
def test_the_distributed_sampler_deals_the_rest_of_the_epoch_to_a_new_world(
    old: int, new: int, taken: int
) -> None:
    length = 50
    first = [
        DistributedResumableSampler(length, rank=r, world_size=old, seed=3) for r in range(old)
    ]
    seen: Counter[int] = Counter()
    iterators = [iter(s) for s in first]
    for _ in range(taken):  # lockstep: each rank takes one sample per round
        for it in iterators:
            seen[next(it)] += 1
    states = [s.state_dict() for s in first]
    assert all(state == states[0] for state in states)  # one state, whatever the rank
    assert states[0]["consumed"] == old * taken
    second = [
        DistributedResumableSampler(length, rank=r, world_size=new, seed=0) for r in range(new)
    ]
    for sampler in second:
        sampler.load_state_dict(states[0])
        seen.update(sampler)
    assert seen == Counter(range(length))  # the epoch: every sample once
    assert all(s.epoch == 1 and s.consumed == 0 for s in second)
    whole = list(DistributedResumableSampler(length, rank=0, world_size=1, seed=3))
    assert whole != list(range(length))  # shuffled, by the seed alone
    # round-robin: new rank r's first sample is the r-th not yet consumed of the one global order
    assert whole[old * taken :][:new] == [next(iter(s)) for s in _fresh(states[0], new)]


def _fresh(state: dict[str, Any], world: int) -> list[DistributedResumableSampler]:
    samplers = [DistributedResumableSampler(50, rank=r, world_size=world) for r in range(world)]
    for sampler in samplers:
        sampler.load_state_dict(state)
    return samplers


def test_the_distributed_sampler_refuses_another_samplers_state() -> None:
    sampler = DistributedResumableSampler(10, rank=0, world_size=2)
    with pytest.raises(CheckpointConfigError, match="not a DistributedResumableSampler's"):
        sampler.load_state_dict({"epoch": 0, "index": 3, "seed": 0, "length": 10})
    with pytest.raises(CheckpointConfigError, match="covered 12 samples"):
        sampler.load_state_dict({**sampler.state_dict(), "length": 12})
    with pytest.raises(CheckpointConfigError, match="rank 2 is not in a world of 2"):
        DistributedResumableSampler(10, rank=2, world_size=2)


def test_a_checkpointer_takes_its_rank_from_the_launchers_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPOTHOP_NNODES", "3")
    monkeypatch.setenv("SPOTHOP_NODE_RANK", "2")
    with Checkpointer(str(tmp_path), interval=FixedInterval(1e9)) as ckpt:
        assert ckpt.world == WorldLayout(world_size=3, rank=2, local_world_size=1)
        ckpt.save({"w": np.ones(2)}, 1).wait()
    assert (tmp_path / "rank-00002").is_dir()
    monkeypatch.setenv("SPOTHOP_NPROC_PER_NODE", "2")  # two processes, and which one is this?
    with pytest.raises(CheckpointConfigError, match="does not say which one this is"):
        Checkpointer(str(tmp_path))
    monkeypatch.setenv("LOCAL_RANK", "1")
    with Checkpointer(str(tmp_path), interval=FixedInterval(1e9)) as ckpt:
        assert ckpt.world == WorldLayout(world_size=6, rank=5, local_world_size=2)


def test_an_emergency_delta_is_re_sharded_through_its_chain(tmp_path: Path) -> None:
    whole = torch.arange(40.0).reshape(4, 10)  # sharded along dim 1: 5 columns per old rank
    for rank in range(2):
        with _checkpointer(tmp_path, 2, rank) as ckpt:
            mine = whole[:, rank * 5 : (rank + 1) * 5].clone()
            state = {"cols": mine, "weights": torch.ones(3)}
            ckpt.save(state, 5, sharded={"cols": Shard(dim=1)}).wait()
            mine[:, 0] = -1.0  # changed before the notice: the delta carries it
            ckpt.save(state, 6, tier="emergency", sharded={"cols": Shard(dim=1)}).wait()
    expected = whole.clone()
    expected[:, 0] = expected[:, 5] = -1.0
    pieces = []
    for rank in range(5):
        with _checkpointer(tmp_path, 5, rank) as ckpt:
            restored = ckpt.restore()
        assert restored is not None and restored.step == 6 and restored.manifest.parent is not None
        assert restored.state["cols"].shape == (4, 2)
        pieces.append(restored.state["cols"])
    assert torch.equal(torch.cat(pieces, dim=1), expected)


def test_ckpt_worlds_lists_each_world_sizes_steps_and_what_is_missing(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    _save_world(tmp_path, 2, 5, Shard())
    _save_world(tmp_path, 1, 8, Shard())
    with _checkpointer(tmp_path, 3, 1) as ckpt:  # a third world whose ranks 0 and 2 never saved
        ckpt.save({"w": np.ones(2)}, 9).wait()
    result = cli("ckpt", "worlds", str(tmp_path), "--json")
    assert result.code == 0
    assert [(w["step"], w["world_size"], w["ranks"], w["complete"]) for w in result.json()] == [
        (5, 2, [0, 1], True),
        (8, 1, [0], True),
        (9, 3, [1], False),
    ]
    assert result.json()[0]["sharded"] == ["/rows"]
    shown = cli("ckpt", "worlds", str(tmp_path))
    assert shown.code == 0 and "1 of 3 (missing 0, 2)" in shown.out
    assert cli("ckpt", "worlds", str(tmp_path / "nowhere")).code == EXIT_NOT_FOUND


def test_new_ranks_agree_on_an_older_step_when_some_cannot_load_the_newest(
    tmp_path: Path,
) -> None:
    """Old rank 1's part of step 8 is damaged: new ranks 0 and 1 (rows from old rank 0 only) could
    load step 8, ranks 2-4 cannot; through the MIN collective all five restore step 5."""
    _save_world(tmp_path, 2, 5, Shard())
    _save_world(tmp_path, 2, 8, Shard())
    (newest,) = [
        p for p in (tmp_path / "rank-00001").iterdir() if p.name.startswith("step-000000000008")
    ]
    for pack in newest.glob("*.pack"):
        pack.write_bytes(b"\0" * pack.stat().st_size)  # same size, wrong bytes
    new = 5
    with _checkpointer(tmp_path, new, 0) as alone:  # on its own, rank 0 would take step 8
        assert (alone.restore() or pytest.fail("nothing restored")).step == 8
    barrier = threading.Barrier(new)
    proposals: list[int] = [0] * new
    steps: dict[int, int | None] = {}

    def run(rank: int) -> None:
        def minimum(value: int) -> int:  # an all_reduce MIN over the five threads
            proposals[rank] = value
            barrier.wait()
            agreed = min(proposals)
            barrier.wait()
            return agreed

        with _checkpointer(tmp_path, new, rank) as ckpt:
            restored = ckpt.restore(agree=minimum)
        steps[rank] = restored.step if restored is not None else None

    threads = [threading.Thread(target=run, args=(r,)) for r in range(new)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert steps == dict.fromkeys(range(new), 5)
