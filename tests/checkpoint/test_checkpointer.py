"""Saving, deltas, chains, garbage collection and the one-save-in-flight rule."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spothop.checkpoint import Checkpointer, CheckpointWriteError, Tier, collect, list_checkpoints
from spothop.checkpoint import pack as pack_mod
from spothop.checkpoint.store import Store
from tests.waiting import scaled


def state(seed: int, n: int = 4096) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "a": rng.random(n),
        "b": {"c": rng.integers(0, 9, (8, 8)), 7: (1.5, "x", None)},
        "flag": True,
    }


def test_round_trip_keeps_values_types_and_metadata(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    original = state(0)
    manifest = ckpt.save(
        original, 42, data_position={"epoch": 1, "index": 5}, user_metadata={"run": "r1"}
    ).wait()
    assert manifest.step == 42 and manifest.tier is Tier.DURABLE and manifest.parent is None
    assert all(len(f.sha256) == 32 and f.size_bytes > 0 for f in manifest.files)  # XXH3-128
    restored = Checkpointer(str(tmp_path)).restore()
    assert restored is not None
    assert np.array_equal(restored.state["a"], original["a"])
    assert restored.state["b"][7] == (1.5, "x", None) and restored.state["flag"] is True
    assert restored.manifest.data_position == {"epoch": 1, "index": 5}
    assert restored.manifest.user_metadata == {"run": "r1"}
    assert {"python", "numpy"} <= set(restored.manifest.rng)


def test_host_copy_isolates_the_save_from_later_training(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path))
    live = state(1)
    expected = live["a"].copy()
    handle = ckpt.save(live, 1)
    live["a"][:] = -1.0  # training goes on while the save runs
    handle.wait()
    restored = ckpt.restore()
    assert restored is not None and np.array_equal(restored.state["a"], expected)


def test_emergency_delta_stores_only_changed_chunks_and_restores_through_the_chain(
    tmp_path: Path,
) -> None:
    ckpt = Checkpointer(str(tmp_path), chunk_bytes=1024)
    live = state(2)
    full = ckpt.save(live, 10).wait()
    live["a"][:3] += 1.0
    handle = ckpt.save(live, 11, tier=Tier.EMERGENCY)
    delta = handle.wait()
    assert delta.parent == full.checkpoint_id
    assert handle.stats.chunks_written == 1
    assert delta.size_bytes < full.size_bytes / 10
    restored = Checkpointer(str(tmp_path)).restore()
    assert restored is not None and restored.step == 11
    assert np.array_equal(restored.state["a"], live["a"])


def test_gc_keeps_the_newest_k_chains(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep_chains=10)
    for step in range(1, 4):
        ckpt.save(state(step), step * 10).wait()
        ckpt.save(state(step + 100), step * 10 + 1, tier="emergency").wait()
    ckpt.wait()  # its own clean-up, which runs after each save returns, is over
    (tmp_path / "step-000000000005-durable-abcdef").mkdir()  # an abandoned, uncommitted save
    plan = collect(Store(str(tmp_path)), 2)
    left = [i for i in list_checkpoints(str(tmp_path))]
    assert [i.step for i in left] == [20, 21, 30, 31]
    assert len(plan.deleted) == 2 and plan.partial_deleted == ["step-000000000005-durable-abcdef"]
    restored = Checkpointer(str(tmp_path)).restore()
    assert restored is not None and restored.step == 31


def test_automatic_gc_after_each_save(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path), keep_chains=2)
    for step in range(5):
        ckpt.save(state(step, 16), step).wait()
    ckpt.wait()  # the clean-up runs after each save has returned
    assert [i.step for i in list_checkpoints(str(tmp_path))] == [3, 4]


def test_local_tier_writes_to_instance_disk_uncompressed(tmp_path: Path) -> None:
    ckpt = Checkpointer(str(tmp_path / "durable"), local_url=str(tmp_path / "local"))
    manifest = ckpt.save(state(3), 5, tier=Tier.LOCAL).wait()
    assert (tmp_path / "local" / manifest.checkpoint_id / "MANIFEST.json").is_file()
    assert not (tmp_path / "durable").exists()
    assert {c.codec.value for leaf in manifest.leaves.values() for c in leaf.chunks} == {"raw"}
    restored = Checkpointer(str(tmp_path / "durable"), local_url=str(tmp_path / "local")).restore()
    assert restored is not None and restored.manifest.tier is Tier.LOCAL


class GatedWrites:
    """Holds every background pack write until released: makes 'in flight' observable without sleeping."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.started = threading.Semaphore(0)
        real = pack_mod.write_pack

        def gated(*args: Any, **kwargs: Any) -> Any:
            self.started.release()
            self.release.wait(timeout=scaled(30))
            return real(*args, **kwargs)

        monkeypatch.setattr(pack_mod, "write_pack", gated)


def test_one_save_in_flight_the_next_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = GatedWrites(monkeypatch)
    ckpt = Checkpointer(str(tmp_path))
    first = ckpt.save(state(1), 1)
    assert gate.started.acquire(timeout=scaled(10))
    second_started = threading.Event()

    def second() -> None:
        ckpt.save(state(2), 2)
        second_started.set()

    worker = threading.Thread(target=second)
    worker.start()
    assert not second_started.wait(timeout=0.2)  # backpressure: blocked behind the first
    assert not first.done()
    gate.release.set()
    worker.join(timeout=scaled(30))
    assert second_started.is_set()
    ckpt.close()
    assert [i.step for i in list_checkpoints(str(tmp_path))] == [1, 2]


def test_an_emergency_save_cancels_an_inflight_durable_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ckpt = Checkpointer(str(tmp_path))
    ckpt.save(state(0), 1).wait()
    gate = GatedWrites(monkeypatch)
    durable = ckpt.save(state(1), 2)
    assert gate.started.acquire(timeout=scaled(10))
    handles: list[Any] = []
    worker = threading.Thread(
        target=lambda: handles.append(ckpt.save(state(2), 3, tier=Tier.EMERGENCY))
    )
    worker.start()
    assert durable._cancel.wait(
        timeout=scaled(10)
    )  # the emergency save asked the durable one to stop
    gate.release.set()
    worker.join(timeout=scaled(30))
    emergency = handles[0]
    with pytest.raises(CheckpointWriteError, match="cancelled"):
        durable.wait()
    assert emergency.wait().parent is not None
    assert [i.step for i in list_checkpoints(str(tmp_path))] == [1, 3]


def test_a_script_that_ends_without_close_still_commits_its_last_save(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import numpy as np\n"
        "from spothop.checkpoint import Checkpointer\n"
        f"Checkpointer({str(tmp_path)!r}).save({{'w': np.random.default_rng(0).random(4_000_000)}}, 7)\n"
    )  # returns as soon as the state is copied; the interpreter exits while the save is written
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(120)
    )
    assert done.returncode == 0, done.stderr
    assert "failed" not in done.stderr
    assert [i.step for i in list_checkpoints(str(tmp_path))] == [7]


def test_ranks_restore_only_a_step_every_rank_committed(tmp_path: Path) -> None:
    """Rank 1's step-2 save never committed (the instance went): both ranks go back to step 1, also
    rank 0, whose own step 2 and a later local snapshot are fine."""
    from spothop.checkpoint import WorldLayout

    def ranks() -> list[Checkpointer]:  # one rank per machine: each local disk its own folder
        return [
            Checkpointer(
                str(tmp_path / "ckpt"),
                local_url=str(tmp_path / f"machine-{r}"),
                world=WorldLayout(world_size=2, rank=r, local_world_size=1),
            )
            for r in (0, 1)
        ]

    rank0, rank1 = ranks()
    for ckpt, rank in ((rank0, 0), (rank1, 1)):
        ckpt.save({"w": np.full(8, 10 + rank)}, 1).wait()
    rank0.save({"w": np.full(8, 20)}, 2).wait()
    rank0.save({"w": np.full(8, 30)}, 3, tier=Tier.LOCAL).wait()
    for ckpt in (rank0, rank1):
        ckpt.close()
    restored = [ckpt.restore(apply_rng=False) for ckpt in ranks()]
    assert [r.step for r in restored if r is not None] == [1, 1]
    assert [int(r.state["w"][0]) for r in restored if r is not None] == [10, 11]


def test_ranks_on_one_machine_agree_on_local_snapshots_too(tmp_path: Path) -> None:
    from spothop.checkpoint import WorldLayout

    def ranks() -> list[Checkpointer]:
        return [
            Checkpointer(
                str(tmp_path / "ckpt"),
                local_url=str(tmp_path / "local"),
                world=WorldLayout(world_size=2, rank=r, local_world_size=2),
            )
            for r in (0, 1)
        ]

    rank0, rank1 = ranks()
    for step in (1, 2):
        rank0.save({"w": np.full(4, step)}, step, tier=Tier.LOCAL).wait()
    rank1.save(
        {"w": np.full(4, -1)}, 1, tier=Tier.LOCAL
    ).wait()  # rank 1 went before its step-2 snapshot
    for ckpt in (rank0, rank1):
        ckpt.close()
    assert [r.step for r in (c.restore(apply_rng=False) for c in ranks()) if r is not None] == [
        1,
        1,
    ]


class ThreadCollective:
    """``all_reduce(MIN)`` between threads: what torch.distributed gives ranks, for in-process tests."""

    def __init__(self, ranks: int) -> None:
        self.values: list[int] = [0] * ranks
        self.barrier = threading.Barrier(ranks)

    def for_rank(self, rank: int) -> Any:
        def minimum(value: int) -> int:
            self.values[rank] = value
            self.barrier.wait()
            result = min(self.values)
            self.barrier.wait()  # nobody overwrites a value before everyone has read the minimum
            return result

        return minimum


def restore_all(ckpts: list[Checkpointer]) -> list[Any]:
    collective = ThreadCollective(len(ckpts))
    results: list[Any] = [None] * len(ckpts)

    def run(rank: int) -> None:
        try:
            results[rank] = ckpts[rank].restore(apply_rng=False, agree=collective.for_rank(rank))
        except Exception as exc:
            results[rank] = exc

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(len(ckpts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), (
        "the ranks did not run the same collectives"
    )
    return results


def two_ranks(tmp_path: Path) -> list[Checkpointer]:
    from spothop.checkpoint import WorldLayout

    return [
        Checkpointer(
            str(tmp_path / "ckpt"),
            local_url=str(tmp_path / f"machine-{r}"),
            world=WorldLayout(world_size=2, rank=r),
        )
        for r in (0, 1)
    ]


def test_agreed_restore_with_no_checkpoint_anywhere_starts_every_rank_afresh(
    tmp_path: Path,
) -> None:
    assert restore_all(two_ranks(tmp_path)) == [None, None]


def test_agreed_restore_fails_on_every_rank_when_one_rank_can_load_nothing(tmp_path: Path) -> None:
    from spothop.checkpoint import NoValidCheckpoint

    ranks = two_ranks(tmp_path)
    for rank, ckpt in enumerate(ranks):
        ckpt.save({"w": np.full(8, rank)}, 1).wait()
        ckpt.close()
    [pack] = (tmp_path / "ckpt" / "rank-00001").glob("step-*/data-00000.pack")
    pack.write_bytes(b"damaged")
    results = restore_all(two_ranks(tmp_path))
    assert all(isinstance(r, NoValidCheckpoint) for r in results), results
