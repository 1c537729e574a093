"""A price series over a window: last, range, per-GPU price and forecast, and its JSON form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from spothop.market.identity import PriceSeriesKey
from spothop.market.price_store import StoredPrice
from spothop.market.price_window import PriceWindow
from spothop.resources.market_id import MarketId

SERIES = PriceSeriesKey(
    MarketId("aws", "us-east-1", "us-east-1a", "p3.8xlarge"), True, "Linux/UNIX"
)
START = datetime(2020, 1, 1, tzinfo=UTC)


def stored(hours: int, price: float) -> StoredPrice:
    return StoredPrice(
        SERIES, START + timedelta(hours=hours), price, "V100-SXM2-16GB", 4, price / 4 / 3600, "test"
    )


def test_a_window_summarises_its_points_and_forecasts_from_the_whole_history() -> None:
    history = [stored(h, 4.0) for h in range(0, 200)]
    window = PriceWindow.of([stored(198, 4.0), stored(199, 3.0)], history)
    assert (
        window.points,
        window.last_usd_per_hour,
        window.min_usd_per_hour,
        window.max_usd_per_hour,
    ) == (2, 3.0, 3.0, 4.0)
    assert window.last_usd_per_gpu_hour == 0.75
    assert (
        window.forecast_method == "naive" and window.forecast_usd_per_hour == 4.0
    )  # a flat history
    as_json = window.to_dict()
    assert (
        as_json["zone"] == "us-east-1a"
        and as_json["location"] == "us-east-1a"
        and as_json["market"] == "spot"
    )
    assert (
        as_json["forecast_6h_usd_per_hour"] == 4.0
        and as_json["first"] == (START + timedelta(hours=198)).isoformat()
    )
