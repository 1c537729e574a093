"""Young/Daly intervals and the time-based default, with an injected clock."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from spothop.checkpoint import (
    CheckpointConfigError,
    Checkpointer,
    FixedInterval,
    YoungDalyInterval,
    daly_interval_s,
    young_interval_s,
)


def test_young_and_daly_match_the_formulas() -> None:
    assert young_interval_s(30, 3600) == pytest.approx(math.sqrt(2 * 30 * 3600))
    ratio = 30 / 7200
    expected = math.sqrt(2 * 30 * 3600) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - 30
    assert daly_interval_s(30, 3600) == pytest.approx(expected)
    assert daly_interval_s(10_000, 3600) == 3600  # a save longer than 2M: checkpoint every M


def test_interval_follows_measured_cost_and_a_changing_market() -> None:
    mtbf = [3600.0]
    policy = YoungDalyInterval(
        lambda: mtbf[0], higher_order=False, min_interval_s=1, max_interval_s=1e9
    )
    assert policy.interval_s(50.0) == pytest.approx(600.0)
    mtbf[0] = 900.0  # the market got worse: checkpoint more often
    assert policy.interval_s(50.0) == pytest.approx(300.0)
    assert policy.interval_s(None) == pytest.approx(young_interval_s(30.0, 900.0))


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(CheckpointConfigError):
        FixedInterval(0)
    with pytest.raises(CheckpointConfigError):
        YoungDalyInterval(0.0).interval_s(1.0)


def test_should_save_is_time_based_by_default(tmp_path: Path) -> None:
    now = [1000.0]
    ckpt = Checkpointer(str(tmp_path), clock=lambda: now[0])
    assert not ckpt.should_save()
    now[0] += 20 * 60
    assert ckpt.should_save()
    ckpt.save({"x": np.zeros(2)}, 1).wait()
    assert not ckpt.should_save()


def test_should_save_uses_the_measured_save_cost(tmp_path: Path) -> None:
    now = [0.0]
    policy = YoungDalyInterval(3600.0, min_interval_s=0, max_interval_s=1e9)
    ckpt = Checkpointer(str(tmp_path), interval=policy, clock=lambda: now[0])
    ckpt.save({"x": np.zeros(2)}, 1).wait()
    assert ckpt.cost.estimate_s is not None
    assert ckpt.next_interval_s() == pytest.approx(daly_interval_s(ckpt.cost.estimate_s, 3600.0))
    assert ckpt.next_interval_s() < policy.interval_s(None)  # a fast save: checkpoint more often


def test_a_stall_basis_plans_from_the_loops_wait_but_never_closer_than_a_whole_save() -> None:
    policy = YoungDalyInterval(
        3600.0, higher_order=False, min_interval_s=1, max_interval_s=1e9, cost_basis="stall"
    )
    assert policy.interval_s(50.0, 2.0) == pytest.approx(
        young_interval_s(2.0, 3600.0)
    )  # 120 s, not 600 s
    assert (
        policy.interval_s(500.0, 0.01) == 500.0
    )  # one save in flight at most: not before it is done
    assert policy.interval_s(50.0, None) == pytest.approx(
        600.0
    )  # no stall measured yet: the whole save
    with pytest.raises(CheckpointConfigError, match="cost_basis"):
        YoungDalyInterval(3600.0, cost_basis="wall")


def test_the_checkpointer_measures_each_saves_stall(tmp_path: Path) -> None:
    policy = YoungDalyInterval(3600.0, min_interval_s=0, max_interval_s=1e9, cost_basis="stall")
    ckpt = Checkpointer(str(tmp_path), interval=policy)
    handle = ckpt.save({"x": np.zeros(1000)}, 1)
    handle.wait()
    ckpt.wait()
    assert ckpt.cost.stall_s == pytest.approx(handle.blocking_s)
    assert ckpt.cost.estimate_s is not None and ckpt.cost.stall_s <= ckpt.cost.estimate_s
    expected = max(daly_interval_s(ckpt.cost.stall_s, 3600.0), ckpt.cost.estimate_s)
    assert ckpt.next_interval_s() == pytest.approx(expected)
