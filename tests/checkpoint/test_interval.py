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
    policy = YoungDalyInterval(lambda: mtbf[0], higher_order=False, min_interval_s=1, max_interval_s=1e9)
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
