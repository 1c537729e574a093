"""Price dates are bounded where they enter, and a stray date in the store is read without walking its span."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spothop.cli.main import main
from spothop.db import make_engine
from spothop.market import PriceStore, price_window
from spothop.market.identity import PriceSeriesKey
from spothop.market.price_store import PriceRecord
from spothop.market.price_window import PriceWindow
from spothop.resources.market_id import MarketId

HEADER = "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice\n"
SERIES = PriceSeriesKey(MarketId.of("aws", "us-east-1", "us-east-1a", "p3.2xlarge"), True, "")


def test_a_price_from_the_year_9999_is_refused_at_import_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "prices.csv"
    path.write_text(
        HEADER
        + "9999-12-31T00:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.9\n"
        + "2024-01-01T00:00:00Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.9\n"
    )
    code = main(["market", "import", str(path), "--json"])
    (report,) = json.loads(capsys.readouterr().out)
    assert code == 5 and report["added"] == 1
    (rejected,) = report["rejected"]
    assert ":2:" in rejected and "between 2006 and 2100" in rejected


@settings(max_examples=40, deadline=None)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
def test_no_price_outside_2006_to_2100_is_stored(when: datetime) -> None:
    store = PriceStore(engine=make_engine("sqlite://"), gpu_lookup=lambda p, t: None)
    result = store.add([PriceRecord(SERIES, when.replace(tzinfo=UTC), 1.0)])
    assert result.added == (1 if 2006 <= when.year <= 2100 else 0)
    assert len(result.rejected) == 1 - result.added


def test_a_stored_price_years_away_does_not_make_the_forecast_walk_the_years(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans: list[timedelta] = []
    real = price_window.forecast_price

    def spy(times: list[datetime], prices: list[float], horizon_h: int) -> object:
        spans.append(max(times) - min(times))  # the hourly grid the forecast samples spans this
        return real(times, prices, horizon_h)

    monkeypatch.setattr(price_window, "forecast_price", spy)
    store = PriceStore(
        engine=make_engine(f"sqlite:///{tmp_path}/p.db"), gpu_lookup=lambda p, t: None
    )
    start = datetime(2024, 1, 1, tzinfo=UTC)
    store.add([PriceRecord(SERIES, start + timedelta(hours=h), 1.0 + h / 100) for h in range(48)])
    # A point the bounds let in, 76 years on: the hourly grid between would be 666,000 hours.
    far = PriceRecord(SERIES, datetime(2100, 1, 1, tzinfo=UTC), 2.0)
    store.add([far])
    history = store.points(series=SERIES)
    window = PriceWindow.of(history, history)
    assert window.points == 49 and window.forecast_usd_per_hour == 2.0
    assert spans == [timedelta(0)]  # the far point's recent history only; not 76 years of hours


def test_a_row_refused_for_its_date_is_not_also_reported_as_imported_out_of_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p.csv"
    path.write_text(
        "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice\n"
        "2020-01-01T00:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.9\n"
        "2020-01-01T01:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.9\n"
        "1900-01-01T00:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.9\n"
    )
    report = PriceStore(f"sqlite:///{tmp_path / 's.db'}").import_file(path)
    assert [p.line for p in report.rejected] == [4]
    assert report.out_of_order == []
