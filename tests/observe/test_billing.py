"""Billing rules as data: minimums, increments, missing prices."""

from __future__ import annotations

import pytest

from spothop.observe.billing import charge, known_price, microusd
from spothop.providers.base import BillingRule
from spothop.providers.local.metadata import PROTOCOLS


def test_a_short_run_is_billed_the_minimum_and_seconds_round_up():
    rule = BillingRule(increment_s=1, minimum_s=60)
    assert rule.billed_seconds(0) == 0
    assert rule.billed_seconds(1.5) == 60
    assert rule.billed_seconds(60.2) == 61
    assert rule.billed_seconds(3600.0000000001) == 3600  # a float sum of ticks, not a new second


def test_per_hour_billing_bills_every_started_hour():
    assert BillingRule(increment_s=3600).billed_seconds(3601) == 7200


def test_a_missing_price_is_missing_never_zero():
    assert known_price(None) is None and known_price(float("nan")) is None
    assert known_price(0.0) is None and known_price(0.0, reserved=True) == 0.0
    missing = charge(BillingRule(increment_s=1), 120, None)
    assert missing.billed_s == 120 and missing.cost_microusd is None


def test_money_is_integer_micro_dollars():
    assert microusd(1.0, 3600) == 1_000_000
    assert charge(BillingRule(), 90, 0.36).cost_microusd == 9_000


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_imitated_cloud_declares_its_documented_rule(protocol):
    rule = PROTOCOLS[protocol].BILLING
    assert rule.source.startswith("https://") and rule.increment_s > 0
