"""spothop.service.offers: the catalog's answer, and the query sent to a server and read back."""

from __future__ import annotations

import pytest

from spothop.errors import ConfigError
from spothop.resources.catalog import OfferQuery, load_catalog
from spothop.service.offers import find_offers, offer_query_from_params, offer_query_params


def test_the_offers_are_the_catalogs_own_dicts_cheapest_first() -> None:
    query = OfferQuery(gpu="H100", spot=True, limit=3)
    found = find_offers(query)
    expected = [o.to_dict(True) for o in load_catalog().query(query)]
    assert found.to_list() == expected and found.to_dict() == {"offers": expected}


def test_a_query_sent_as_parameters_reads_back_the_same() -> None:
    query = OfferQuery(
        gpu="A100", count=2, providers=("aws", "gcp"), spot=False, max_usd_per_gpu_hour=3.5
    )
    params = {k: str(v) for k, v in offer_query_params(query).items()}
    assert params["providers"] == "aws,gcp" and params["spot"] == "false"
    assert offer_query_from_params(params) == query


def test_a_bad_parameter_is_named() -> None:
    with pytest.raises(ConfigError, match="count='two': expected a int"):
        offer_query_from_params({"count": "two"})
    with pytest.raises(ConfigError, match="spot='maybe'"):
        offer_query_from_params({"spot": "maybe"})
