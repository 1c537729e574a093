import datetime as dt
from pathlib import Path

import pytest

from spothop.errors import CatalogError, ConfigError, UnknownGpuError
from spothop.resources.catalog import (
    COLUMNS,
    Catalog,
    OfferQuery,
    builtin_offerings,
    format_catalog_csv,
    load_catalog,
    read_catalog_text,
    save_user_offerings,
)
from spothop.resources.currency import builtin_rates

HEADER = ",".join(COLUMNS)
GOOD = "aws,us-east-1,us-east-1a,p5.48xlarge,H100-SXM5-80GB,8,192,2048,30400,3200,nvswitch,USD,55.04,28.80,2026-11-01"


def test_builtin_catalog_is_large_and_covers_six_providers():
    offerings = builtin_offerings()
    assert len(offerings) >= 150
    providers = {o.provider for o in offerings}
    assert {"aws", "gcp", "azure", "aliyun", "tencent", "volcengine"} <= providers
    for o in offerings:
        assert o.price_date >= dt.date(2024, 1, 1), o
        assert (
            o.usd_per_gpu_hour(spot=False) is None or 0.05 < o.usd_per_gpu_hour(spot=False) < 30
        ), o
        if o.spot_price_usd_per_hour is not None and o.on_demand_price_usd_per_hour is not None:
            assert o.spot_price_usd_per_hour < o.on_demand_price_usd_per_hour, o


def test_builtin_keys_are_unique():
    offerings = builtin_offerings()
    assert len({o.market_id for o in offerings}) == len(offerings)


def test_cny_prices_are_normalised_with_the_rate_table():
    cny = [o for o in builtin_offerings() if o.currency == "CNY"]
    assert cny, "the China clouds price in CNY"
    rate = builtin_rates().to_usd(1.0, "CNY")
    for o in cny:
        assert o.on_demand_price_original is not None and o.on_demand_price_usd_per_hour is not None
        assert o.on_demand_price_usd_per_hour == pytest.approx(o.on_demand_price_original * rate)


def test_h100_x8_spot_on_three_providers_sorted_by_gpu_hour():
    found = load_catalog().query(OfferQuery(gpu="H100", count=8, spot=True))
    assert len({o.provider for o in found}) >= 3
    prices = [o.usd_per_gpu_hour(spot=True) for o in found]
    assert prices == sorted(prices)  # type: ignore[type-var]
    assert all(o.gpu.startswith("H100") and o.gpu_count == 8 for o in found)


def test_malformed_rows_name_file_line_field_and_the_rest_still_load():
    text = "\n".join(
        [
            "# a comment before the header",
            HEADER,
            GOOD,
            GOOD.replace("H100-SXM5-80GB", "H1OO"),
            GOOD.replace(",8,192", ",0,192").replace("us-east-1a", "us-east-1b"),
            GOOD.replace("55.04", "-3").replace("us-east-1a", "us-east-1c"),
            GOOD.replace("nvswitch", "carrier-pigeon").replace("us-east-1a", "us-east-1d"),
            GOOD.replace("2026-11-01", "yesterday").replace("us-east-1a", "us-east-1e"),
            GOOD.replace(",USD,", ",XYZ,").replace("us-east-1a", "us-east-1f"),
            GOOD + ",extra",
        ]
    )
    result = read_catalog_text(text, "mine.csv")
    assert [o.zone for o in result.offerings] == ["us-east-1a"]
    where = [(e.path, e.line, e.field) for e in result.errors]
    assert where == [
        ("mine.csv", 4, "gpu"),
        ("mine.csv", 5, "gpu_count"),
        ("mine.csv", 6, "on_demand_price"),
        ("mine.csv", 7, "interconnect"),
        ("mine.csv", 8, "price_date"),
        ("mine.csv", 9, "currency"),
        ("mine.csv", 10, None),
    ]
    assert "did you mean" in result.errors[0].reason
    assert "mine.csv:4 field 'gpu'" in str(result.errors[0])


def test_absurd_price_is_refused_with_reason():
    result = read_catalog_text(HEADER + "\n" + GOOD.replace("55.04", "400000"), "x.csv")
    assert not result.offerings
    assert "monthly" in result.errors[0].reason


def test_wrong_header_is_a_file_level_error():
    with pytest.raises(CatalogError, match="header lacks"):
        read_catalog_text("InstanceType,Price\nx,1\n", "vms.csv")


def test_csv_round_trip_keeps_every_field():
    offerings = builtin_offerings()[:40]
    again = read_catalog_text(format_catalog_csv(offerings, "round trip"), "rt.csv")
    assert not again.errors
    strip = lambda o: o.model_copy(update={"source": ""})  # noqa: E731
    assert [strip(o) for o in again.offerings] == [strip(o) for o in offerings]


def test_user_imports_replace_that_providers_builtin_rows(spothop_home: Path):
    base = builtin_offerings()[0]
    cheaper = base.model_copy(
        update={
            "on_demand_price_original": 0.01,
            "on_demand_price_usd_per_hour": 0.01,
            "spot_price_original": None,
            "spot_price_usd_per_hour": None,
            "currency": "USD",
        }
    )
    path = save_user_offerings(base.provider, [cheaper], "test")
    assert path.parent == spothop_home / "catalog"
    merged = load_catalog()
    got = merged.get(base.provider, base.region, base.zone, base.instance_type)
    assert got is not None and got.on_demand_price_usd_per_hour == 0.01
    others = [o for o in builtin_offerings() if o.provider != base.provider]
    assert len(merged) == len(others) + 1


def test_a_bad_row_of_a_saved_import_is_reported_and_the_other_rows_load(spothop_home: Path):
    (spothop_home / "catalog").mkdir()
    good_elsewhere = GOOD.replace("us-east-1a", "us-east-1b")
    (spothop_home / "catalog" / "mine.csv").write_text(
        HEADER
        + "\n"
        + GOOD.replace("8,192", "x,192")
        + "\n"
        + good_elsewhere
        + "\n"
        + GOOD[:40]
        + "\n"
    )
    catalog = load_catalog()
    assert [(e.line, e.field) for e in catalog.refused] == [(2, "gpu_count"), (4, None)]
    assert "mine.csv:2" in str(catalog.refused[0])
    assert catalog.get("aws", "us-east-1", "us-east-1b", "p5.48xlarge") is not None
    assert (
        catalog.get("aws", "us-east-1", "us-east-1a", "p5.48xlarge") is None
    )  # the import replaced aws's rows


def test_a_catalog_folder_that_is_a_file_is_a_clear_error(spothop_home: Path):
    (spothop_home / "catalog").write_text("not a folder")
    with pytest.raises(CatalogError, match="is a file"):
        load_catalog()


def test_a_folder_named_like_a_catalog_file_is_skipped(spothop_home: Path):
    (spothop_home / "catalog" / "aws.csv").mkdir(parents=True)
    assert len(load_catalog()) == len(builtin_offerings())


@pytest.mark.parametrize("provider", ["../escape", "a/b", ".hidden", ""])
def test_an_import_is_saved_only_under_a_plain_provider_name(spothop_home: Path, provider: str):
    with pytest.raises(ConfigError, match="not a plain name"):
        save_user_offerings(provider, builtin_offerings()[:1], "test")
    assert not (spothop_home / "escape.csv").exists()


def test_query_filters():
    catalog = load_catalog()
    q = OfferQuery(
        gpu="A100",
        min_gpu_memory_gib=80,
        spot=False,
        providers=("gcp", "aws"),
        max_usd_per_gpu_hour=10,
    )
    found = catalog.query(q)
    assert found
    for o in found:
        assert o.gpu.startswith("A100") and o.gpu_memory_gib >= 80 and o.provider in {"gcp", "aws"}
        assert (o.usd_per_gpu_hour(spot=False) or 99) <= 10
    pcie = catalog.query(OfferQuery(interconnect="PCIE", spot=False))
    assert pcie and all(o.interconnect.value == "pcie" for o in pcie)
    fast = catalog.query(OfferQuery(min_tflops=500))
    assert fast and all(o.effective_tflops_per_gpu >= 500 for o in fast)


def test_sort_by_effective_tflops_hour():
    found = load_catalog().query(OfferQuery(sort="tflops", limit=20))
    values = [o.usd_per_effective_tflops_hour(spot=True) for o in found]
    assert len(found) == 20 and values == sorted(values)  # type: ignore[type-var]


def test_measurements_replace_nominal_figures():
    catalog = load_catalog()
    first = next(iter(catalog))
    measured = catalog.with_measurements(
        lambda p, t: 1.0 if (p, t) == (first.provider, first.instance_type) else None
    )
    again = measured.get(first.provider, first.region, first.zone, first.instance_type)
    assert again is not None and again.effective_tflops_per_gpu == 1.0
    others = [o for o in measured if o.instance_type != first.instance_type]
    assert all(o.measured_tflops_per_gpu is None for o in others)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"count": 0}, ConfigError),
        ({"count": 10**9}, ConfigError),
        ({"max_usd_per_gpu_hour": -1}, ConfigError),
        ({"max_usd_per_gpu_hour": float("nan")}, ConfigError),
        ({"max_usd_per_gpu_hour": float("inf")}, ConfigError),
        ({"min_tflops": float("nan")}, ConfigError),
        ({"min_tflops": 1e300}, ConfigError),
        ({"min_gpu_memory_gib": float("-inf")}, ConfigError),
        ({"min_gpu_memory_gib": 1e12}, ConfigError),
        ({"sort": "vibes"}, ConfigError),
        ({"interconnect": "token-ring"}, ConfigError),
    ],
)
def test_bad_queries_are_config_errors(kwargs, error):
    with pytest.raises(error):
        OfferQuery(**kwargs)


def test_unknown_gpu_query_suggests():
    with pytest.raises(UnknownGpuError) as info:
        Catalog().query(OfferQuery(gpu="H1000"))
    assert info.value.suggestions
