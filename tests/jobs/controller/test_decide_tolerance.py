"""The tolerance policies decide consults: registered by name, each choosing as its docstring says."""

from __future__ import annotations

import pytest

from spothop.errors import ConfigError
from spothop.jobs.spec import Tolerance
from spothop.scheduler.market_view import MarketKind
from spothop.scheduler.placement import rank
from spothop.scheduler.requirements import Requirements
from spothop.scheduler.tolerance import (
    BALANCED_MAX_INTERRUPTIONS,
    BALANCED_WINDOW_S,
    NoticeBlindResponse,
    Situation,
    policies,
    policy_for,
)
from tests.jobs.controller.factories import NOW, market


def _ranked(kind: MarketKind, rate_per_h: float = 0.02) -> tuple:  # type: ignore[type-arg]
    return tuple(
        rank(market(default_rate_per_h=rate_per_h), Requirements(), kinds=(kind,)).candidates
    )


def test_every_spec_tolerance_has_a_registered_policy_and_an_unknown_one_is_named() -> None:
    assert set(policies()) == {t.value for t in Tolerance}
    with pytest.raises(ConfigError, match=r"unknown policy 'reckless'.*aggressive, balanced"):
        policy_for("reckless")


@pytest.mark.parametrize(
    ("name", "response"),
    [
        ("aggressive", NoticeBlindResponse.KEEP),
        ("balanced", NoticeBlindResponse.REPLACE),
        ("conservative", NoticeBlindResponse.ON_DEMAND),
    ],
)
def test_each_policy_answers_notice_blindness_its_own_way(
    name: str, response: NoticeBlindResponse
) -> None:
    assert policy_for(name).notice_blind(Situation(now=NOW)) is response


def test_balanced_counts_only_the_interruptions_inside_its_window() -> None:
    spot, on_demand = _ranked(MarketKind.SPOT), _ranked(MarketKind.ON_DEMAND)
    balanced = policy_for("balanced")
    old = tuple(NOW - BALANCED_WINDOW_S - 60 - i for i in range(BALANCED_MAX_INTERRUPTIONS))
    assert balanced.choose(spot, on_demand, Situation(NOW, old)).candidates[0].market_kind is (
        MarketKind.SPOT
    )
    recent = tuple(NOW - 60 * i for i in range(BALANCED_MAX_INTERRUPTIONS))
    choice = balanced.choose(spot, on_demand, Situation(NOW, recent))
    assert choice.candidates[0].market_kind is MarketKind.ON_DEMAND
    # Spot stays in the list as the fallback.
    assert MarketKind.SPOT in {c.market_kind for c in choice.candidates}


def test_market_auto_merges_both_kinds_on_score() -> None:
    spot, on_demand = _ranked(MarketKind.SPOT), _ranked(MarketKind.ON_DEMAND)
    choice = policy_for("balanced").choose(spot, on_demand, Situation(NOW, prefer_spot=False))
    scores = [c.score for c in choice.candidates]
    assert scores == sorted(scores) and len(scores) == len(spot) + len(on_demand)


def test_conservative_leaves_out_stormy_spot_and_aggressive_never_on_demand() -> None:
    stormy, on_demand = _ranked(MarketKind.SPOT, rate_per_h=0.5), _ranked(MarketKind.ON_DEMAND)
    kinds = {
        c.market_kind
        for c in policy_for("conservative").choose(stormy, on_demand, Situation(NOW)).candidates
    }
    assert kinds == {MarketKind.ON_DEMAND}
    choice = policy_for("aggressive").choose((), on_demand, Situation(NOW))
    assert choice.candidates == () and "never" in choice.reason
