"""spothop.service.report and .plan: what a bad option says, and what a plan leaves out."""

from __future__ import annotations

import pytest

from spothop.errors import ConfigError
from spothop.jobs.spec import load_job
from spothop.jobs.store import JobStore
from spothop.service.plan import data_location, plan_providers, reliability_history
from spothop.service.report import CostQuery, costs


def test_costs_over_an_empty_store_are_no_groups(store: JobStore) -> None:
    summary = costs(store, {}, CostQuery(since="7d", by="zone"))
    assert summary.to_dict() == {"since": "7d", "by": "zone", "groups": []}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (CostQuery(by="colour"), "--by 'colour': use one of"),
        (CostQuery(since="soon"), "--since 'soon': use a span like 30d"),
    ],
)
def test_a_bad_span_or_grouping_names_the_flag(
    store: JobStore, query: CostQuery, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        costs(store, {}, query)


def test_where_the_data_is_is_provider_slash_region() -> None:
    assert data_location(" aws / us-east-1 ", 10.0) == ("aws", "us-east-1")
    assert data_location(None, 0.0) is None
    with pytest.raises(ConfigError, match="--data-gib needs --data-at"):
        data_location(None, 1.0)
    with pytest.raises(ConfigError, match="--data-at is PROVIDER/REGION"):
        data_location("aws/us/east", 0.0)


def test_a_provider_that_cannot_be_made_is_left_out_and_said() -> None:
    said: list[str] = []
    spec = load_job({"name": "p", "run": "true"})
    assert plan_providers(spec, ["no-such-cloud"], said.append) == []
    assert len(said) == 1 and said[0].startswith("provider no-such-cloud left out: ")


def test_a_home_without_a_store_has_no_history() -> None:
    assert reliability_history(0.0) is None
