"""``spothop catalog refresh --provider NAME``: live offerings diffed into the stored catalog, applied in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import ConfigError
from spothop.providers.catalog_refresh import refresh_catalog
from spothop.resources.catalog import load_catalog
from spothop.resources.diff import OfferingAdded, PriceChanged
from spothop.testing import FakeProvider, make_market, make_offering


def _fake(spot_usd_per_hour: float, region: str = "fake-1") -> FakeProvider:
    offering = make_offering(
        region=region, zone=f"{region}a", spot_price_usd_per_hour=spot_usd_per_hour
    )
    return FakeProvider(markets=[make_market(offering)])


def test_a_refresh_adds_then_changes_only_what_moved_and_the_next_load_sees_it() -> None:
    first = refresh_catalog(_fake(2.0))
    assert [type(c) for c in first.changes] == [OfferingAdded] and first.saved is not None
    other_region = refresh_catalog(_fake(2.0, region="fake-2"))
    assert [type(c) for c in other_region.changes] == [OfferingAdded]  # fake-1 is not removed
    moved = refresh_catalog(_fake(2.5))
    (change,) = moved.changes
    assert isinstance(change, PriceChanged) and change.market == "spot"
    assert (change.old_usd_per_hour, change.new_usd_per_hour) == (2.0, 2.5)
    stored = {o.region: o for o in load_catalog() if o.provider == "fake"}
    assert stored["fake-1"].spot_price_usd_per_hour == 2.5 and "fake-2" in stored
    assert refresh_catalog(_fake(2.6), min_change_pct=10).changes == []


def test_a_dry_run_saves_nothing_and_an_empty_answer_changes_nothing(spothop_home: Path) -> None:
    assert refresh_catalog(_fake(2.0), save=False).saved is None
    assert not (spothop_home / "catalog").exists()
    with pytest.raises(ConfigError, match="listed no offerings"):
        refresh_catalog(FakeProvider(markets=[]))


def test_the_command_refreshes_from_ec2_on_moto_and_says_where_prices_came_from(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from tests.providers.aws.moto_cloud import fake_credentials, in_process

    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("SPOTHOP_AWS_REGIONS", "us-east-1")
    with in_process():
        result = cli("catalog", "refresh", "--provider", "aws", "--json")
        assert result.code == 0, result.err
        report = result.json()
        assert report["regions"] == ["us-east-1"] and report["live_offerings"] > 100
        assert any("Pricing API" in n and "built-in catalog" in n for n in report["notes"])
        kinds = {c["kind"] for c in report["changes"]}
        assert {"added", "price_changed"} <= kinds
        text = cli("catalog", "refresh", "--provider", "aws", "--dry-run")
    assert text.code == 0 and "no changes" in text.out and "Pricing API" in text.err
    rows = [o for o in load_catalog() if o.provider == "aws"]
    assert {o.region for o in rows} >= {"us-east-1", "us-west-2"}  # us-west-2 kept as it was
    g5 = next(o for o in rows if (o.instance_type, o.zone) == ("g5.xlarge", "us-east-1a"))
    assert g5.spot_price_usd_per_hour == 0.00001  # moto's price, now in the stored catalog


def test_an_unknown_provider_is_bad_input(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("catalog", "refresh", "--provider", "nope")
    assert result.code == 2 and "unknown provider 'nope'" in result.err
