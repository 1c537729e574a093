"""Re-forming a real data-parallel run (torch.distributed, gloo, one process per rank): 2 ranks
train and save mid-epoch, then 2, 3 or 1 ranks restore and finish the run.

Tolerance for the re-formed runs: every step's global batch is the same 12 samples in any
world and the loss is their sum over 12, so a re-formed run computes the same update as the
uninterrupted one except for the order in which float32 partial sums are added (per rank, then
across ranks). Each such difference is a few ulps (float32 eps = 1.2e-7); over the five
remaining steps of this contracting SGD they stay within ~1e-6 relative (measured: ≤ 1.6e-7);
``REL = 1e-5`` leaves a tenfold margin while still catching any real mistake (a wrong sample,
a lost momentum, a misplaced shard moves the loss by percents). With the same world size the
run is bit-identical.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint.reshard_train import SAMPLES, STEPS_PER_EPOCH, Config, train

pytest.importorskip("torch")

STEPS, SAVE_AT = 10, 5  # the save falls one step into epoch 1 (4 steps an epoch)
REL = 1e-5


def _loss(record: dict[str, Any], step: int) -> float:
    return float.fromhex(record["losses"][str(step)])


def _final(record: dict[str, Any]) -> list[float]:
    return [float.fromhex(v) for v in record["final"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("reshard")


@pytest.fixture(scope="module")
def replicated(runs: Path) -> list[dict[str, Any]]:
    """The uninterrupted 2-rank run; it saves at step 5 on its way (what the others resume)."""
    return train(Config(str(runs / "replicated"), str(runs / "replicated-ref"), 2, STEPS, SAVE_AT))


@pytest.fixture(scope="module")
def zero(runs: Path) -> list[dict[str, Any]]:
    """The same with the momentum sharded over the 2 ranks (padded rule: 5 + 5 of 10 rows)."""
    config = Config(str(runs / "zero"), str(runs / "zero-ref"), 2, STEPS, SAVE_AT, mode="zero")
    return train(config)


def _resume(runs: Path, name: str, world: int, **options: Any) -> list[dict[str, Any]]:
    url = runs / f"{name}-to-{world}"
    shutil.copytree(runs / name, url)  # each resume writes its own checkpoints
    return train(Config(str(url), str(runs / f"{name}-out-{world}"), world, STEPS, **options))


def _every_sample_once_per_epoch(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> None:
    """Steps < SAVE_AT from the interrupted run, the rest from the resumed one, all ranks."""
    by_epoch: dict[int, Counter[int]] = {}
    for records, steps in ((before, range(SAVE_AT)), (after, range(SAVE_AT, STEPS))):
        for step in steps:
            seen = by_epoch.setdefault(step // STEPS_PER_EPOCH, Counter())
            for record in records:
                seen.update(record["samples"].get(str(step), []))
    complete = STEPS // STEPS_PER_EPOCH
    for epoch in range(complete):
        assert by_epoch[epoch] == Counter(range(SAMPLES)), f"epoch {epoch}"
    assert max(by_epoch[complete].values()) == 1  # the partial last epoch repeats nothing


def _global_batches(records: list[dict[str, Any]], steps: range) -> list[set[int]]:
    return [{i for r in records for i in r["samples"][str(s)]} for s in steps]


def test_resuming_with_the_same_world_size_is_bit_identical(
    runs: Path, replicated: list[dict[str, Any]]
) -> None:
    resumed = _resume(runs, "replicated", 2)
    assert [r["restored_step"] for r in resumed] == [SAVE_AT, SAVE_AT]
    assert [r["resharded_from"] for r in resumed] == [None, None]
    assert resumed[0]["final"] == replicated[0]["final"]
    assert all(
        resumed[0]["losses"][str(s)] == replicated[0]["losses"][str(s)] for s in range(5, 10)
    )
    _every_sample_once_per_epoch(replicated, resumed)


@pytest.mark.parametrize("world", [3, 1])
def test_a_run_reformed_from_2_ranks_continues_its_loss_curve_and_sees_every_sample_once(
    runs: Path, replicated: list[dict[str, Any]], world: int
) -> None:
    resumed = _resume(runs, "replicated", world)
    assert [r["restored_step"] for r in resumed] == [SAVE_AT] * world  # every rank, one step
    assert [r["resharded_from"] for r in resumed] == [2] * world
    _every_sample_once_per_epoch(replicated, resumed)
    # The rest of the epoch is dealt anew, yet each step's global batch is the same samples.
    assert _global_batches(resumed, range(SAVE_AT, STEPS)) == _global_batches(
        replicated, range(SAVE_AT, STEPS)
    )
    for step in range(SAVE_AT, STEPS):
        assert _loss(resumed[0], step) == pytest.approx(_loss(replicated[0], step), rel=REL)
    assert _loss(resumed[0], SAVE_AT) < _loss(replicated[0], SAVE_AT - 1)  # still going down
    assert _final(resumed[0]) == pytest.approx(_final(replicated[0]), rel=REL, abs=1e-6)
    assert all(r["final"] == resumed[0]["final"] for r in resumed)  # the replicas agree


@pytest.mark.parametrize("world", [3, 1])
def test_a_rank_sharded_momentum_is_concatenated_and_re_split(
    runs: Path, zero: list[dict[str, Any]], world: int
) -> None:
    resumed = _resume(runs, "zero", world, mode="zero")
    assert [r["resharded_from"] for r in resumed] == [2] * world
    _every_sample_once_per_epoch(zero, resumed)
    for step in range(SAVE_AT, STEPS):
        assert _loss(resumed[0], step) == pytest.approx(_loss(zero[0], step), rel=REL)
    # Momentum is what carries steps 5-9 here: a lost or misplaced shard would not match.
    assert _final(resumed[0]) == pytest.approx(_final(zero[0]), rel=REL, abs=1e-6)


def test_a_shard_that_does_not_split_evenly_is_refused_on_every_rank(runs: Path) -> None:
    # 10 momentum rows under the 'even' rule: 5 + 5 on 2 ranks, and no way to 3.
    name = "zero-even"
    train(Config(str(runs / name), str(runs / "even-ref"), 2, SAVE_AT, SAVE_AT, "zero", "even"))
    refused = _resume(runs, name, 3, mode="zero")  # its own rule is not the saved one
    for record in refused:
        assert "'/zero/momentum' has 10 rows along dim 0" in record["error"]
        assert "into 3 ranks" in record["error"] and "padded" in record["error"]
        assert record["samples"] == {}  # nothing trained from a wrong state
