"""Goodput: the share of paid time whose work is kept."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from spothop.checkpoint.interval import daly_interval_s
from spothop.scheduler.goodput import (
    MAX_INTERVAL_S,
    MIN_INTERVAL_S,
    auto_interval_s,
    goodput,
    goodput_array,
)


def test_a_market_that_never_preempts_loses_only_the_saves() -> None:
    assert goodput(0.0, 600.0, 30.0, 60.0, 120.0) == pytest.approx(600 / 630)
    assert auto_interval_s(0.0, 30.0) == MAX_INTERVAL_S


def test_the_worked_example_of_the_docstring() -> None:
    # λ = 1/h, τ = 600 s, C = 30 s, R = 60 s, B = 120 s: waste per preemption 180 + 315 s.
    expected = (600 / 630) / (1 + (1 / 3600) * (120 + 60 + 630 / 2))
    assert goodput(1.0, 600.0, 30.0, 60.0, 120.0) == pytest.approx(expected)


def test_the_auto_interval_is_dalys_within_the_librarys_bounds() -> None:
    assert auto_interval_s(0.5, 30.0) == pytest.approx(daly_interval_s(30.0, 7200.0))
    assert auto_interval_s(1000.0, 30.0) == MIN_INTERVAL_S


rates = st.floats(0.0, 20.0)
costs = st.floats(0.0, 600.0)


@given(rates, costs, costs, costs)
def test_goodput_is_a_share_and_falls_as_anything_gets_worse(
    rate: float, save: float, restart: float, boot: float
) -> None:
    base = goodput(rate, None, save, restart, boot)
    assert 0.0 < base <= 1.0
    # Daly's formula jumps to τ = M where a save costs 2M; where saves cost a tenth of the
    # time between preemptions or less (every job worth running on spot), goodput falls with λ.
    assume(save * (rate + 0.5) / 3600 <= 0.1)
    assert goodput(rate + 0.5, None, save, restart, boot) <= base + 1e-12
    assert goodput(rate, None, save, restart + 10, boot) <= base + 1e-12
    assert goodput(rate, None, save, restart, boot + 10) <= base + 1e-12


@given(st.floats(0.01, 20.0), st.floats(1.0, 600.0), st.floats(60.0, 20000.0))
def test_the_auto_interval_is_near_the_best_fixed_one(
    rate: float, save: float, fixed: float
) -> None:
    assume(save * rate / 3600 <= 0.1)  # the regime Daly's expansion is made for
    auto = goodput(rate, None, save, 60.0, 120.0)
    assert auto >= goodput(rate, fixed, save, 60.0, 120.0) - 0.02


@given(
    st.lists(st.floats(0.0, 20.0), min_size=1, max_size=20),
    costs,
    st.one_of(st.none(), st.floats(1.0, 30000.0)),
)
def test_the_array_form_equals_the_scalar_one(
    rate: list[float], save: float, interval: float | None
) -> None:
    boot = np.linspace(30.0, 300.0, len(rate))
    good, tau = goodput_array(np.array(rate), interval, save, 60.0, boot)
    for i, r in enumerate(rate):
        assert good[i] == pytest.approx(goodput(r, interval, save, 60.0, float(boot[i])))
        expected_tau = auto_interval_s(r, save) if interval is None else interval
        assert tau[i] == pytest.approx(expected_tau)
