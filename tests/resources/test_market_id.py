"""One market identity: the empty-string zone convention, validation, and offerings keyed by it."""

from __future__ import annotations

import datetime as dt

import pytest

from spothop.resources import Catalog, Interconnect, MarketId, Offering

ZONAL = MarketId("aws", "us-east-1", "us-east-1a", "p3.2xlarge")
REGIONAL = MarketId("azure", "eastus", "", "Standard_NC6s_v3")


def offering(zone: str | None, region: str = "us-west-1") -> Offering:
    return Offering(
        provider="lambda",
        region=region,
        zone=zone,
        instance_type="gpu_1x_a100",
        gpu="A100-SXM4-40GB",
        gpu_count=1,
        vcpus=30,
        memory_gib=200,
        interconnect=Interconnect.NONE,
        on_demand_price_usd_per_hour=1.29,
        price_date=dt.date(2024, 1, 1),
    )


def test_a_regional_market_has_the_empty_zone_and_is_located_by_its_region() -> None:
    assert REGIONAL.regional and not ZONAL.regional
    assert (REGIONAL.location, ZONAL.location) == ("eastus", "us-east-1a")
    assert REGIONAL.slug == "azure/eastus/Standard_NC6s_v3"


def test_none_for_a_zone_is_refused_and_of_converts_it() -> None:
    with pytest.raises(
        ValueError, match=r"zone must be a string, got None \(a regional market's zone is \"\""
    ):
        MarketId("azure", "eastus", None, "Standard_NC6s_v3")  # type: ignore[arg-type]
    assert MarketId.of("azure", "eastus", None, "Standard_NC6s_v3") == REGIONAL


def test_an_empty_provider_is_refused_and_an_unknown_region_is_kept_apart() -> None:
    with pytest.raises(ValueError, match=r"MarketId\.provider must not be empty"):
        MarketId("", "us-east-1", "", "p3.2xlarge")
    unknown = MarketId("aws", "", "", "")  # an agent with no metadata service knows only its cloud
    assert unknown != MarketId("aws", "us-east-1", "", "p3.2xlarge") and unknown.slug == "aws//"


def test_market_ids_hash_and_sort_with_regional_and_zonal_mixed() -> None:
    whole_region = MarketId("aws", "us-east-1", "", "p3.2xlarge")
    markets = [ZONAL, REGIONAL, whole_region]
    assert sorted(markets) == [whole_region, ZONAL, REGIONAL] and len({*markets, ZONAL}) == 3


def test_an_offering_is_identified_by_its_market_id() -> None:
    assert offering(None).market_id == MarketId("lambda", "us-west-1", "", "gpu_1x_a100")
    assert offering("us-west-1a").market_id.zone == "us-west-1a"
    catalog = Catalog([offering(None), offering(None), offering("us-west-1a")])
    assert len(catalog) == 2  # the same market twice is one entry; later wins
    assert catalog.get("lambda", "us-west-1", None, "gpu_1x_a100") is not None
    assert catalog.get("lambda", "us-west-1", "", "gpu_1x_a100") is catalog.get(
        "lambda", "us-west-1", None, "gpu_1x_a100"
    )


def test_a_market_id_serialises_its_four_names() -> None:
    assert REGIONAL.to_dict() == {
        "provider": "azure",
        "region": "eastus",
        "zone": "",
        "instance_type": "Standard_NC6s_v3",
    }
