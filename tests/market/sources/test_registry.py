"""The source registry: every shared price file detected and read, unknown formats refused, plugins added."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import pytest

from spothop.market import PriceStore, TraceError, read_price_file
from spothop.market import sources as registry
from spothop.market.identity import PriceSeriesKey
from spothop.market.price_history import PriceImport, PricePoint
from spothop.market.sources.base import FileHead, PriceSource
from spothop.market.trace_markets import trace_files, trace_market
from spothop.resources.market_id import MarketId
from tests.conftest import shared_path

PRICES = shared_path("prices")
# Every price file in the shared data, with the format it is in (shared/data/README.md).
SHARED_PRICE_FILES = sorted(p for p in PRICES.rglob("*") if p.suffix in {".csv", ".json"})
EXPECTED_FORMAT = {"aws-spot-price-history-p2-p3-2019-2020.csv": "aws-csv"}


def expected_format(path: Path) -> str:
    if path.name in EXPECTED_FORMAT:
        return EXPECTED_FORMAT[path.name]
    return (
        "aws-json"
        if path.parent.parent.name == "aws-describe-spot-price-history-raw"
        else "azure-csv"
    )


def test_the_shared_data_has_price_files_of_every_built_in_format() -> None:
    assert {expected_format(p) for p in SHARED_PRICE_FILES} == set(registry.price_format_names())
    assert len(SHARED_PRICE_FILES) == 1 + 30 + 3


@pytest.mark.parametrize("path", SHARED_PRICE_FILES, ids=lambda p: str(p.relative_to(PRICES)))
def test_every_shared_price_file_is_detected_and_read_without_problems(path: Path) -> None:
    source = registry.detect_price_source(path)
    assert source.name == expected_format(path)
    records, problems = read_price_file(path)
    assert records and problems == []
    assert {r.series.market.provider for r in records} == {source.provider}
    positions = [r.line if source.positions == "line" else r.record for r in records]
    assert all(isinstance(where, int) and where >= 1 for where in positions)


def test_the_help_text_and_the_format_list_come_from_the_registry() -> None:
    assert registry.price_format_names() == ["aws-csv", "aws-json", "azure-csv"]
    text = registry.formats_help()
    assert all(f"{s.name}: {s.description}" in text for s in registry.price_sources())


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("x.csv", "a,b,c\n1,2,3\n"),
        ("x.json", '{"Prices": []}'),
        ("empty.csv", ""),
        ("x.parquet", "PAR1\x00\x01"),
    ],
)
def test_a_file_no_source_claims_is_refused_with_the_known_formats(
    tmp_path: Path, name: str, content: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(TraceError) as info:
        read_price_file(path)
    message = str(info.value)
    assert str(path) in message and "unknown price file format" in message
    assert all(name in message for name in registry.price_format_names()) and "--format" in message


def test_an_unknown_format_name_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("Date,NC6\n2/24/2020,$0.2\n")
    with pytest.raises(
        TraceError, match=r"unknown format 'gcp-csv'; choose one of aws-csv, aws-json, azure-csv"
    ):
        read_price_file(path, "gcp-csv")
    with pytest.raises(TraceError, match="no such file"):
        read_price_file(tmp_path / "absent.csv")


def test_a_forced_format_that_does_not_fit_the_file_names_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_text("Date,NC6\n2/24/2020,$0.2\n")
    with pytest.raises(TraceError, match="header lacks Timestamp"):
        read_price_file(path, "aws-csv")


class TsvPrices(PriceSource):
    """A made-up tab-separated format: ``when<TAB>region<TAB>type<TAB>price``, regional prices."""

    name: ClassVar[str] = "example-tsv"
    description: ClassVar[str] = "tab-separated when, region, type, price"
    provider: ClassVar[str] = "example"
    positions: ClassVar[Literal["line", "record"]] = "line"

    def detect(self, head: FileHead) -> bool:
        return head.text.startswith("when\tregion\t")

    def read(self, path: Path) -> PriceImport:
        from datetime import datetime

        lines = path.read_text().splitlines()[1:]
        points = [
            PricePoint(
                timestamp=datetime.fromisoformat(w),
                region=r,
                zone="",
                instance_type=t,
                product="",
                price_usd_per_hour=float(p),
                line=n,
            )
            for n, (w, r, t, p) in enumerate((line.split("\t") for line in lines), start=2)
        ]
        return PriceImport(points, [])

    def key(self, point: PricePoint) -> PriceSeriesKey:
        return PriceSeriesKey(MarketId(self.provider, point.region, "", point.instance_type))


@pytest.fixture
def plugin() -> Iterator[TsvPrices]:
    source = TsvPrices()
    registry.register(source)
    yield source
    registry.unregister(source.name)


def test_a_registered_format_is_detected_imported_and_listed(
    plugin: TsvPrices, tmp_path: Path
) -> None:
    path = tmp_path / "prices.tsv"
    path.write_text("when\tregion\ttype\tprice\n2024-01-01T00:00:00+00:00\twest\tg1\t0.5\n")
    store = PriceStore(f"sqlite:///{tmp_path}/p.db", gpu_lookup=lambda p, t: None)
    report = store.import_file(path)
    assert (report.format, report.added) == ("example-tsv", 1)
    (point,) = store.points()
    assert point.series.market == MarketId("example", "west", "", "g1")
    assert (
        "example-tsv" in registry.price_format_names() and "example-tsv" in registry.formats_help()
    )


TRACES = sorted(
    trace_files(shared_path("traces", "cant-be-late"))
    + trace_files(shared_path("traces", "spothedge-gcp-a100"))
)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shared_trace_names_its_market(path: Path) -> None:
    market, _ = trace_market(path, gpu_lookup=lambda p, t: None)
    assert market.zone == path.stem.partition("_")[0] and market.zone.startswith(market.region)
    assert market.region != market.zone and market.provider in path.parent.name


def test_a_trace_named_like_no_family_is_refused_with_the_known_names(tmp_path: Path) -> None:
    path = tmp_path / "somewhere" / "trace.json"
    path.parent.mkdir()
    path.write_text("{}")
    with pytest.raises(TraceError, match=r"cannot tell the market.*cant-be-late"):
        trace_market(path, gpu_lookup=lambda p, t: None)
