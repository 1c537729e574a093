"""Reliability: shrinkage, provider signals, and the ranking of the shared Can't Be Late traces."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from spothop.market import (
    AdvisorBucket,
    AvailabilityTrace,
    MarketEvidence,
    MarketId,
    ProviderSignals,
    ReliabilityBook,
    evidence_from_trace,
    evidence_from_traces,
)
from spothop.market.reliability import ADVISOR_BUCKET_RATE_PER_H, DEFAULT_PRIOR_RATE_PER_H, score_of
from spothop.market.trace_markets import trace_files, trace_market
from tests.conftest import shared_path

A = MarketId("aws", "us-east-1", "us-east-1a", "p3.2xlarge")
B = MarketId("aws", "us-east-1", "us-east-1b", "p3.2xlarge")
C = MarketId("aws", "us-east-1", "us-east-1c", "p3.2xlarge")
V100 = "V100-SXM2-16GB"


def ev(market: MarketId, n: int, hours: float, up: float = 1.0) -> MarketEvidence:
    return MarketEvidence(
        market, V100, hours, n, up_s=up * hours * 3600, down_s=(1 - up) * hours * 3600
    )


def spearman(a: list[float], b: list[float]) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def test_evidence_counts_instance_preemptions_and_outages() -> None:
    trace = AvailabilityTrace("t", 600.0, np.array([2, 2, 1, 0, 0, 2, 2, 1]), capacity=2)
    e = evidence_from_trace(trace, A, V100, window_s=None)
    assert e.preemptions == 1 + 1 + 1  # 2→1, 1→0, 2→1
    assert e.instance_hours == pytest.approx(10 * 600 / 3600)
    assert (e.up_s, e.down_s, e.recoveries, e.lifetimes_ended) == (6 * 600, 2 * 600, 1, 1)
    window = evidence_from_trace(trace, A, V100, window_s=1800)  # the last three ticks
    assert window.preemptions == 1 and window.instance_hours == pytest.approx(5 * 600 / 3600)


def test_one_observation_is_shrunk_towards_the_group() -> None:
    book = ReliabilityBook.from_evidence([ev(A, 1, 1.0), ev(B, 10, 100.0), ev(C, 12, 100.0)])
    a = book.get(A)
    assert a is not None and a.raw_rate_per_h == 1.0
    pooled = 23 / 201
    assert pooled < a.preemption_rate_per_h < 0.5  # pulled most of the way to the group's rate
    b = book.get(B)
    assert b is not None and b.preemption_rate_per_h == pytest.approx(
        0.1, rel=0.15
    )  # much data: trusted


def test_unknown_markets_get_the_group_prior_and_no_data_the_default() -> None:
    book = ReliabilityBook.from_evidence([ev(B, 10, 100.0), ev(C, 12, 100.0)])
    assert book.preemption_rate_per_h(A, V100) == pytest.approx(22 / 200)
    assert book.mean_time_between_preemptions_s(A, V100) == pytest.approx(3600 / (22 / 200))
    empty = ReliabilityBook.from_evidence([])
    assert empty.mean_time_between_preemptions_s(A) == pytest.approx(
        3600 / DEFAULT_PRIOR_RATE_PER_H
    )


def test_provider_signals_move_markets_with_little_data() -> None:
    group = [ev(B, 10, 100.0), ev(C, 12, 100.0), ev(A, 0, 2.0, up=0.5)]
    plain = ReliabilityBook.from_evidence(group).get(A)
    calm = ReliabilityBook.from_evidence(
        group, {A: ProviderSignals(10, AdvisorBucket.UNDER_5)}
    ).get(A)
    stormy = ReliabilityBook.from_evidence(
        group, {A: ProviderSignals(1, AdvisorBucket.OVER_20)}
    ).get(A)
    assert plain and calm and stormy
    assert stormy.score < plain.score < calm.score
    assert calm.prior.rate_per_h == ADVISOR_BUCKET_RATE_PER_H[AdvisorBucket.UNDER_5]
    with pytest.raises(ValueError, match=r"1\.\.10"):
        ProviderSignals(placement_score=11)


def test_score_is_monotone_and_bounded() -> None:
    assert score_of(1.0, 0.0) == 1.0 and score_of(0.0, 5.0) == 0.0
    assert score_of(0.9, 0.1) > score_of(0.9, 0.2) and score_of(0.9, 0.1) > score_of(0.8, 0.1)
    assert score_of(0.5, 0.1) == pytest.approx(0.5 * math.exp(-0.1))


def test_trace_files_name_their_markets() -> None:
    folder = shared_path("traces", "cant-be-late")
    market, gpu = trace_market(
        folder / "preemption-1node-aws-2023-04-22" / "us-east-1c_v100_1.json"
    )
    assert market == MarketId("aws", "us-east-1", "us-east-1c", "p3.2xlarge") and gpu.startswith(
        "V100"
    )
    market, gpu = trace_market(
        shared_path("traces", "spothedge-gcp-a100", "us-central1-a_a100_40gb_8.json")
    )
    assert market == MarketId("gcp", "us-central1", "us-central1-a", "a2-highgpu-8g")


def test_shared_traces_rank_consistently_with_availability_and_preemptions() -> None:
    pairs = evidence_from_traces(trace_files(shared_path("traces", "cant-be-late")))
    book = ReliabilityBook.from_evidence([e for e, _ in pairs])
    ranked = book.ranked()
    assert len(ranked) == 16  # 19 files; the same market in several folders is one market
    scores = [r.score for r in ranked]
    availability = [r.raw_availability or 0.0 for r in ranked]
    calm = [-(r.raw_rate_per_h or 0.0) for r in ranked]
    assert spearman(scores, availability) > 0.85
    assert spearman(scores, calm) > 0.8
    # pairwise: a market both more available and less preempted never ranks below
    for x, y in itertools.permutations(ranked, 2):
        if (x.raw_availability or 0) > (y.raw_availability or 0) + 0.1 and (
            x.raw_rate_per_h or 0
        ) < (y.raw_rate_per_h or 0):
            assert x.score > y.score, (x.market.slug, y.market.slug)
    assert all(0.0 <= s <= 1.0 for s in scores)
