"""The bill as lines: a run's seconds under a rule, one line per price step, integer micro-dollars."""

from __future__ import annotations

import pytest

from spothop.providers.base import BillingRule
from spothop.providers.billing import billed_price_steps, billing_line, billing_lines, microusd

EC2 = BillingRule(increment_s=1, minimum_s=60)
PROTECTED = BillingRule(increment_s=1, price_fixed_s=3600)


def history(changes: list[tuple[float, float]], first: float):
    """A market's steps from a list of changes: what SpotPriceHistory returns."""

    def steps(start: float, end: float) -> list[tuple[float, float]]:
        before = [p for t, p in changes if t <= start]
        return [(start, before[-1] if before else first)] + [
            (t, p) for t, p in changes if start < t <= end
        ]

    return steps


@pytest.mark.parametrize("run_s", [0.4, 59.0, 61.5, 1000.2, 7300.0])
def test_lines_bill_the_whole_run_under_the_rule(run_s):
    steps = history([(100.0, 0.5), (700.0, 0.3), (5000.0, 0.45)], 0.4)(0.0, run_s)
    lines = billing_lines(EC2, 0.0, run_s, steps)
    assert sum(line.billed_s for line in lines) == EC2.billed_seconds(run_s)
    assert [line.price_usd_per_hour for line in lines] == [p for _, p in steps]
    assert all(
        line.cost_microusd == microusd(line.price_usd_per_hour, line.billed_s) for line in lines
    )
    assert lines[0].billed_s >= min(60, run_s) and lines[-1].end_s == run_s


def test_the_minimum_falls_on_the_first_line():
    lines = billing_lines(EC2, 10.0, 40.0, [(10.0, 1.0), (20.0, 2.0)])
    assert [(line.billed_s, line.price_usd_per_hour) for line in lines] == [(60.0, 1.0), (0.0, 2.0)]


def test_a_protection_period_holds_the_launch_price_then_the_market_takes_over():
    market = history([(1800.0, 0.9), (4000.0, 0.2)], 0.5)
    steps = billed_price_steps(PROTECTED, 100.0, 130.0, 5000.0, market)
    assert steps == [(130.0, 0.5), (3700.0, 0.9), (4000.0, 0.2)]
    assert billed_price_steps(PROTECTED, 100.0, 130.0, 3000.0, market) == [(130.0, 0.5)]
    assert billed_price_steps(PROTECTED, 100.0, 3800.0, 5000.0, market) == market(3800.0, 5000.0)


def test_a_run_billed_tick_by_tick_adds_up_to_the_whole_run_billed_at_once():
    market = history([(95.5, 0.61), (400.0, 0.58), (3700.0, 0.66), (3701.0, 0.7)], 0.6)
    launched, running, end = 90.0, 93.25, 4321.75
    whole = billing_lines(
        PROTECTED, running, end, billed_price_steps(PROTECTED, launched, running, end, market)
    )
    # The instance host's way: each tick's changes close a line; the open one closes at the end.
    closed, line_start = 0, running
    line_price = billed_price_steps(PROTECTED, launched, running, running, market)[0][1]
    t = running
    while t < end:
        now = min(end, t + 0.37)
        for at, price in billed_price_steps(PROTECTED, launched, t, now, market)[1:]:
            closed += billing_line(PROTECTED, running, line_start, at, line_price).cost_microusd
            line_start, line_price = at, price
        t = now
    closed += billing_line(PROTECTED, running, line_start, end, line_price).cost_microusd
    assert closed == sum(line.cost_microusd for line in whole)
    assert len(whole) == 4  # the launch price, the market's at 3690 s, two changes after
