from datetime import UTC, datetime

from spothop.market import PricePoint, PriceSeries


def test_price_series_from_points_holds_each_price_until_the_next():
    def point(hour: int, price: float) -> PricePoint:
        return PricePoint(
            timestamp=datetime(2020, 1, 1, hour, tzinfo=UTC),
            zone="z",
            instance_type="t",
            product="Linux/UNIX",
            price_usd_per_hour=price,
        )

    series = PriceSeries.from_points(
        [point(3, 2.0), point(0, 1.0), point(5, 3.0)],
        start=datetime(2020, 1, 1, 1, tzinfo=UTC),
        duration_s=6 * 3600,
    )
    assert series.price_at(0) == 1.0  # the price in force at start
    assert series.price_at(2 * 3600 - 1) == 1.0
    assert series.price_at(2 * 3600) == 2.0
    assert series.price_at(4 * 3600) == 3.0
    assert series.price_at(6 * 3600) == 1.0  # wraps
