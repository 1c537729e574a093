"""Placement consults the compatibility matrix for a job that carries a checkpoint."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spothop.providers.fake.factories import make_offering
from spothop.resources.compat import CompatNeed
from spothop.scheduler.errors import NoCandidates
from spothop.scheduler.market_view import MarketView
from spothop.scheduler.placement import rank
from spothop.scheduler.requirements import Requirements

GPUS = ("H100-SXM5-80GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "V100-SXM2-16GB", "T4", "MI300X")


def _offering(gpu: str, price: float, zone: str = "fake-1a"):  # type: ignore[no-untyped-def]
    return make_offering(
        instance_type=f"{gpu}-1", gpu=gpu, gpu_count=1, zone=zone, spot_price_usd_per_hour=price
    )


def _view(*offerings) -> MarketView:  # type: ignore[no-untyped-def]
    return MarketView(now=0.0, offerings=tuple(offerings))


def test_a_checkpoint_from_a_hopper_gpu_is_not_placed_on_an_older_one() -> None:
    # The V100 is by far the cheapest per TFLOPS-hour here; without a checkpoint it would win.
    view = _view(_offering("V100-SXM2-16GB", 0.01), _offering("H100-SXM5-80GB", 3.0))
    assert rank(view, Requirements()).candidates[0].offering.gpu == "V100-SXM2-16GB"
    ranking = rank(view, Requirements().moving_from("H100-SXM5-80GB"))
    assert [c.offering.gpu for c in ranking.candidates] == ["H100-SXM5-80GB"]
    assert ranking.excluded["compatible"] == 1
    assert ranking.refused == {
        "V100-SXM2-16GB": "H100-SXM5-80GB → V100-SXM2-16GB: architecture Volta is older "
        "than the checkpoint's Hopper"
    }
    assert ranking.to_dict()["refused"] == ranking.refused


def test_an_empty_ranking_says_the_matrix_refused_and_why() -> None:
    view = _view(_offering("V100-SXM2-16GB", 0.5), _offering("T4", 0.2))
    ranking = rank(view, Requirements().moving_from("A100-SXM4-40GB"))
    assert not ranking
    assert ranking.most_excluding == "compatible"
    text = ranking.explain()
    assert "compatibility matrix for a checkpoint made on A100-SXM4-40GB" in text
    assert "A100-SXM4-40GB → T4: architecture Turing is older than the checkpoint's Ampere" in text
    with pytest.raises(NoCandidates, match="architecture Volta is older"):
        ranking.raise_if_empty()


def test_the_need_narrows_by_memory_and_widens_by_a_declared_minimum() -> None:
    view = _view(*(_offering(g, 1.0) for g in GPUS))
    small = rank(
        view, Requirements().moving_from("A100-SXM4-80GB", CompatNeed(state_memory_gib=60))
    )
    assert {c.offering.gpu for c in small.candidates} == {"A100-SXM4-80GB", "H100-SXM5-80GB"}
    assert "40 GiB per GPU is less than the 60.0 GiB" in small.refused["A100-SXM4-40GB"]
    wide = rank(view, Requirements().moving_from("H100-SXM5-80GB", CompatNeed("Volta")))
    assert {c.offering.gpu for c in wide.candidates} == set(GPUS) - {"MI300X"}


def test_no_checkpoint_gpu_imposes_nothing() -> None:
    view = _view(*(_offering(g, 1.0) for g in GPUS))
    req = Requirements()
    assert req.moving_from(None) is req
    assert len(rank(view, req).candidates) == len(GPUS)
    assert "compatible" not in rank(view, req).excluded


def test_a_spelling_of_the_checkpoint_gpu_is_kept_canonical() -> None:
    req = Requirements(gpu="A100").moving_from("nvidia-a100-sxm4-40gb")
    assert req.checkpoint_gpu == "A100-SXM4-40GB"
    assert req.to_dict()["checkpoint_gpu"] == "A100-SXM4-40GB"


@settings(max_examples=60, deadline=None)
@given(
    source=st.sampled_from(GPUS),
    gpus=st.lists(st.sampled_from(GPUS), min_size=1, max_size=6),
    memory=st.sampled_from((None, 20.0, 70.0)),
)
def test_the_vectorised_filter_agrees_with_requirements_failed(
    source: str, gpus: list[str], memory: float | None
) -> None:
    offerings = [_offering(g, 1.0, zone=f"z{i}") for i, g in enumerate(gpus)]
    req = Requirements().moving_from(source, CompatNeed(state_memory_gib=memory))
    ranked = {c.offering.zone for c in rank(_view(*offerings), req).candidates}
    assert ranked == {o.zone for o in offerings if "compatible" not in req.failed(o)}
