"""Price forecasts: the selection rule on made-up series, and the backtest on the shared AWS history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from spothop.market import backtest_series, forecast_price, summarise
from spothop.market.forecast import hourly_prices
from spothop.market.sources.aws import AwsCsv
from tests.conftest import shared_path

START = datetime(2020, 1, 1, tzinfo=UTC)


def hours(n: int) -> list[datetime]:
    return [START + timedelta(hours=i) for i in range(n)]


def test_hourly_sampling_holds_each_price_until_the_next() -> None:
    times = [START + timedelta(minutes=m) for m in (0, 90, 200)]
    first, y = hourly_prices(times, [1.0, 2.0, 3.0])
    assert first == START and y.tolist() == [1.0, 1.0, 2.0, 2.0]  # 0h, 1h, 2h, 3h (200 min = 3h20)


def test_flat_price_falls_back_to_naive() -> None:
    fc = forecast_price(hours(400), [0.9] * 400, 6)
    assert fc.fell_back and fc.method == "naive" and fc.price_usd_per_hour == 0.9
    assert fc.target == START + timedelta(hours=399 + 6)


def test_steady_drift_is_followed_by_a_trend() -> None:
    prices = [1.0 + 0.001 * i for i in range(400)]
    fc = forecast_price(hours(400), prices, 6)
    assert not fc.fell_back and fc.method.startswith("trend")
    assert fc.price_usd_per_hour == pytest.approx(prices[-1] + 0.006, abs=1e-4)
    assert fc.validation_mae is not None and fc.naive_validation_mae is not None
    assert fc.validation_mae < fc.naive_validation_mae


def test_backtest_on_a_drift_beats_naive_and_on_a_flat_series_ties() -> None:
    drift = backtest_series("drift", hours(500), [1.0 + 0.001 * i for i in range(500)], 6)
    flat = backtest_series("flat", hours(500), [2.0] * 500, 6)
    assert drift is not None and drift.verdict == "better" and drift.moving
    assert (
        flat is not None and flat.verdict == "tie" and not flat.moving and flat.model_share == 0.0
    )
    assert backtest_series("short", hours(5), [1.0] * 5, 24) is None


def test_shared_aws_backtest_beats_naive_on_most_moving_series_at_6h() -> None:
    points = (
        AwsCsv().read(shared_path("prices", "aws-spot-price-history-p2-p3-2019-2020.csv")).points
    )
    series: dict[tuple[str, str], list[tuple[datetime, float]]] = {}
    for p in points:
        series.setdefault((p.zone, p.instance_type), []).append((p.timestamp, p.price_usd_per_hour))
    results = [
        r
        for name, pts in series.items()
        if (r := backtest_series("/".join(name), [t for t, _ in pts], [v for _, v in pts], 6))
    ]
    six = summarise(results, 6)
    assert (
        six.series == 95 and six.moving == 42
    )  # 3 series have one point; 53 never moved in the test span
    assert six.better_share_moving >= 0.6
    assert six.mae < six.naive_mae and six.mape_pct < six.naive_mape_pct
    # a tie means the rule kept the last price: flat series are never "improved" by noise
    assert all(r.moving for r in results if r.verdict != "tie")
