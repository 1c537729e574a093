"""Price history in the store: idempotent imports, live reads, per-GPU normalisation.

Contracts:

- **Idempotent.** A point is identified by its series (provider, region, zone,
  instance type, spot or on-demand, product) and its instant (to the
  millisecond). Recording a point already stored adds nothing and reports it
  as a duplicate (with its file line); if the stored price differs, the
  report says so and the stored price stays — history is append-only.
- **Forgiving per record.** Unparsable records, prices of 0 or less and
  repeats inside one file are reported with their line and skipped; points
  that go back in time within a file are imported (the store orders by
  time) and reported as out of order. Only an unreadable file raises.
- **Normalised where it is known.** ``usd_per_gpu_second = price_usd_per_hour
  / gpu_count / 3600`` with ``gpu_count`` from the catalog
  (:func:`spothop.resources.catalog.load_catalog`, user imports included). An
  instance type the catalog does not know keeps its per-instance price, its
  per-GPU figures stay empty, and the import report names it: a guessed GPU
  count would silently skew every comparison built on it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, and_, func, select, update

from spothop.bounds import PRICE_USD_PER_HOUR, YEAR_FIRST, YEAR_LAST
from spothop.db import default_database_url, dialect_insert, shared_engine
from spothop.market.identity import PriceSeriesKey
from spothop.market.price_history import PriceProblem
from spothop.market.price_import import PriceRecord, read_price_file, resolve_format
from spothop.resources.market_id import MarketId
from spothop.state import ensure_schema
from spothop.state.market_tables import prices

SECONDS_PER_HOUR = 3600.0
_INSERT_CHUNK = 2000  # rows per executemany: bounded memory, few round trips

GpuLookup = Callable[[str, str], tuple[str, int] | None]
"""``(provider, instance_type) → (canonical GPU name, GPUs per instance)``, or None if unknown."""


class SpotPriceLike(Protocol):
    """What a provider adapter's live price read looks like (``providers.base.SpotPrice``)."""

    @property
    def provider(self) -> str: ...
    @property
    def region(self) -> str: ...
    @property
    def zone(self) -> str | None: ...
    @property
    def instance_type(self) -> str: ...
    @property
    def price_usd_per_hour(self) -> float: ...
    @property
    def timestamp(self) -> float: ...


def catalog_gpu_lookup() -> GpuLookup:
    """A lookup over the catalog spothop decides with (built-in plus user imports)."""
    from spothop.resources.catalog import load_catalog

    table = {
        (o.provider, o.instance_type): (o.gpu, o.gpu_count) for o in load_catalog(measured=False)
    }
    return lambda provider, instance_type: table.get((provider, instance_type))


@dataclass(frozen=True)
class StoredPrice:
    """One stored point. ``usd_per_gpu_second`` is None where the GPU count is unknown."""

    series: PriceSeriesKey
    timestamp: datetime
    price_usd_per_hour: float
    gpu: str | None
    gpu_count: int | None
    usd_per_gpu_second: float | None
    source: str


@dataclass
class AddResult:
    """What recording a batch did. ``no_gpu_count`` lists ``provider/type`` the catalog lacks."""

    added: int = 0
    duplicates: list[PriceProblem] = field(default_factory=list)
    rejected: list[PriceProblem] = field(default_factory=list)
    out_of_order: list[PriceProblem] = field(default_factory=list)
    no_gpu_count: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[PriceProblem]:
        return [*self.rejected, *self.duplicates, *self.out_of_order]


@dataclass
class ImportReport(AddResult):
    """An :class:`AddResult` for one file, with what was read and in which format."""

    path: str = ""
    format: str = ""
    read: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: counts, and every problem as ``path:line: reason``."""
        return {
            "path": self.path,
            "format": self.format,
            "read": self.read,
            "added": self.added,
            "duplicates": [str(p) for p in self.duplicates],
            "rejected": [str(p) for p in self.rejected],
            "out_of_order": [str(p) for p in self.out_of_order],
            "per_gpu_unavailable": self.no_gpu_count,
        }


@dataclass(frozen=True)
class SeriesSummary:
    series: PriceSeriesKey
    points: int
    first: datetime
    last: datetime
    last_price_usd_per_hour: float
    gpu: str | None
    gpu_count: int | None


def _ms(stamp: datetime) -> int:
    return round(stamp.timestamp() * 1000)


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _problem(record: PriceRecord, reason: str) -> PriceProblem:
    return PriceProblem(
        path=record.source or "live", line=record.line, record=record.record, reason=reason
    )


def _series_filter(key: PriceSeriesKey) -> Any:
    m = key.market
    return and_(
        prices.c.provider == m.provider,
        prices.c.region == m.region,
        prices.c.zone == m.zone,
        prices.c.instance_type == m.instance_type,
        prices.c.market == key.market_kind,
        prices.c.product == key.product,
    )


def _key_of(row: Any) -> PriceSeriesKey:
    market = MarketId(row.provider, row.region, row.zone, row.instance_type)
    return PriceSeriesKey(market, spot=row.market == "spot", product=row.product)


def _insert_ignoring_conflicts(conn: Connection, rows: list[dict[str, Any]]) -> None:
    """Insert, skipping rows whose point a concurrent writer stored first (unique key)."""
    conn.execute(dialect_insert(conn.dialect.name)(prices).on_conflict_do_nothing(), rows)


def _dated_in_bounds(record: PriceRecord) -> bool:
    return YEAR_FIRST <= record.timestamp.year <= YEAR_LAST


def out_of_order(records: Sequence[PriceRecord]) -> list[PriceProblem]:
    """Records that go against their series' direction in the file.

    A file may list a series oldest-first (CSV exports) or newest-first (the
    AWS API); the direction is set by the series' first two distinct times.
    """
    last: dict[PriceSeriesKey, datetime] = {}
    direction: dict[PriceSeriesKey, int] = {}
    found: list[PriceProblem] = []
    for record in records:
        key, stamp = record.series, record.timestamp
        previous = last.get(key)
        last[key] = stamp
        if previous is None or stamp == previous:
            continue
        step = 1 if stamp > previous else -1
        expected = direction.setdefault(key, step)
        if step != expected:
            found.append(
                _problem(
                    record,
                    f"out of order: {stamp.isoformat()} after "
                    f"{previous.isoformat()} (imported; the store orders by time)",
                )
            )
    return found


class PriceStore:
    """Price history in the store (SQLite by default, PostgreSQL by URL); tables made on first use."""

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: Engine | None = None,
        gpu_lookup: GpuLookup | None = None,
    ) -> None:
        self.engine = engine or shared_engine(url or default_database_url())
        ensure_schema(self.engine)
        self._gpu_lookup = gpu_lookup

    def _gpu(self, provider: str, instance_type: str) -> tuple[str, int] | None:
        if self._gpu_lookup is None:
            self._gpu_lookup = catalog_gpu_lookup()
        return self._gpu_lookup(provider, instance_type)

    # -- writing --------------------------------------------------------------

    def import_file(self, path: str | Path, fmt: str | None = None) -> ImportReport:
        """Read a price file (format detected unless ``fmt`` names one) and store its new points."""
        path = Path(path)
        chosen = resolve_format(path, fmt).name
        records, problems = read_price_file(path, chosen)
        result = self.add(records)
        report = ImportReport(path=str(path), format=chosen, read=len(records) + len(problems))
        report.added, report.no_gpu_count = result.added, result.no_gpu_count
        report.duplicates = [
            p for p in problems if p.reason.startswith("duplicate")
        ] + result.duplicates
        report.rejected = [
            p for p in problems if not p.reason.startswith("duplicate")
        ] + result.rejected
        # a row refused for its date was not imported, so it is not also "out of order (imported)"
        report.out_of_order = out_of_order([r for r in records if _dated_in_bounds(r)])
        return report

    def record_prices(
        self,
        points: Iterable[SpotPriceLike],
        *,
        spot: bool = True,
        product: str = "",
        source: str = "live",
    ) -> AddResult:
        """Store an adapter's live price reads (``Provider.spot_prices()``); same contract as imports.

        A point with a non-finite or non-positive price, or with no region or
        instance type, is rejected with its 1-based position in ``points``.
        """
        records: list[PriceRecord] = []
        rejected: list[PriceProblem] = []
        for index, point in enumerate(points, start=1):
            price = float(point.price_usd_per_hour)
            if not (math.isfinite(price) and 0 < price <= PRICE_USD_PER_HOUR.high):
                rejected.append(
                    PriceProblem(
                        path=source,
                        record=index,
                        reason=f"price {price} not in (0, {PRICE_USD_PER_HOUR.high:g}] USD per hour",
                    )
                )
                continue
            if not (point.provider and point.region and point.instance_type):
                rejected.append(
                    PriceProblem(
                        path=source,
                        record=index,
                        reason=(
                            f"no provider, region or instance type in {point.provider!r}/{point.region!r}/"
                            f"{point.instance_type!r}: a price belongs to a named market"
                        ),
                    )
                )
                continue
            market = MarketId.of(point.provider, point.region, point.zone, point.instance_type)
            records.append(
                PriceRecord(
                    PriceSeriesKey(market, spot, product),
                    datetime.fromtimestamp(point.timestamp, tz=UTC),
                    price,
                    source,
                    record=index,
                )
            )
        result = self.add(records)
        result.rejected = rejected + result.rejected
        return result

    def add(self, records: Sequence[PriceRecord]) -> AddResult:
        """Store records not already stored; duplicates (in the batch or the store) are reported.

        A record dated outside 2006-2100 (:data:`spothop.bounds.YEAR_FIRST`, ``YEAR_LAST``) is
        rejected with its line: a price from the year 9999 is a typo, and a store holding one
        would make every hourly view of its series span eight thousand years."""
        result = AddResult()
        by_series: dict[PriceSeriesKey, list[PriceRecord]] = defaultdict(list)
        for record in records:
            if not _dated_in_bounds(record):
                result.rejected.append(
                    _problem(
                        record,
                        f"dated {record.timestamp.isoformat()}: a price must be dated between "
                        f"{YEAR_FIRST} and {YEAR_LAST}; fix the row's timestamp",
                    )
                )
                continue
            by_series[record.series].append(record)
        missing_gpu: set[str] = set()
        with self.engine.begin() as conn:
            rows: list[dict[str, Any]] = []
            for key, batch in by_series.items():
                rows.extend(self._new_rows(conn, key, batch, result, missing_gpu))
            for start in range(0, len(rows), _INSERT_CHUNK):
                _insert_ignoring_conflicts(conn, rows[start : start + _INSERT_CHUNK])
        result.added = len(rows)
        result.no_gpu_count = sorted(missing_gpu)
        return result

    def _new_rows(
        self,
        conn: Connection,
        key: PriceSeriesKey,
        batch: list[PriceRecord],
        result: AddResult,
        missing_gpu: set[str],
    ) -> list[dict[str, Any]]:
        stamps = [_ms(r.timestamp) for r in batch]
        stored = {
            row.time_unix_ms: row.price_usd_per_hour
            for row in conn.execute(
                select(prices.c.time_unix_ms, prices.c.price_usd_per_hour).where(
                    _series_filter(key), prices.c.time_unix_ms.between(min(stamps), max(stamps))
                )
            )
        }
        gpu = self._gpu(key.market.provider, key.market.instance_type)
        if gpu is None:
            missing_gpu.add(f"{key.market.provider}/{key.market.instance_type}")
        m = key.market
        rows: list[dict[str, Any]] = []
        for record, ms in zip(batch, stamps, strict=True):
            if ms in stored:
                differs = (
                    ""
                    if stored[ms] == record.price_usd_per_hour
                    else (f" (stored price {stored[ms]} kept, not {record.price_usd_per_hour})")
                )
                result.duplicates.append(
                    _problem(
                        record,
                        f"duplicate: {key.slug} at "
                        f"{record.timestamp.isoformat()} already stored{differs}",
                    )
                )
                continue
            stored[ms] = record.price_usd_per_hour
            rows.append(
                {
                    "provider": m.provider,
                    "region": m.region,
                    "zone": m.zone,
                    "instance_type": m.instance_type,
                    "market": key.market_kind,
                    "product": key.product,
                    "time_unix_ms": ms,
                    "price_usd_per_hour": record.price_usd_per_hour,
                    "gpu": gpu[0] if gpu else None,
                    "gpu_count": gpu[1] if gpu else None,
                    "usd_per_gpu_second": record.price_usd_per_hour / gpu[1] / SECONDS_PER_HOUR
                    if gpu
                    else None,
                    "source": record.source[-512:],
                }
            )
        return rows

    def fill_gpu_counts(self) -> int:
        """Give stored points of types the catalog did not know at import, and knows now, their GPU
        and per-GPU price (after ``spothop catalog import``); returns how many points were filled."""
        filled = 0
        with self.engine.begin() as conn:
            for provider, instance_type in self._types_without_gpu(conn):
                gpu = self._gpu(provider, instance_type)
                if gpu is None:
                    continue
                filled += conn.execute(
                    update(prices)
                    .where(
                        prices.c.provider == provider,
                        prices.c.instance_type == instance_type,
                        prices.c.gpu.is_(None),
                    )
                    .values(
                        gpu=gpu[0],
                        gpu_count=gpu[1],
                        usd_per_gpu_second=prices.c.price_usd_per_hour / gpu[1] / SECONDS_PER_HOUR,
                    )
                ).rowcount
        return filled

    # -- reading ----------------------------------------------------------------

    def types_without_gpu(self) -> list[str]:
        """``provider/instance_type`` of stored points with no GPU (the catalog lacked the type)."""
        with self.engine.connect() as conn:
            return [
                f"{provider}/{instance_type}"
                for provider, instance_type in self._types_without_gpu(conn)
            ]

    @staticmethod
    def _types_without_gpu(conn: Connection) -> list[tuple[str, str]]:
        query = (
            select(prices.c.provider, prices.c.instance_type)
            .where(prices.c.gpu.is_(None))
            .distinct()
            .order_by(prices.c.provider, prices.c.instance_type)
        )
        return [(row.provider, row.instance_type) for row in conn.execute(query)]

    def time_range(self) -> tuple[datetime, datetime] | None:
        """The first and last instants the store holds prices for, or None when empty."""
        with self.engine.connect() as conn:
            low, high = conn.execute(
                select(func.min(prices.c.time_unix_ms), func.max(prices.c.time_unix_ms))
            ).one()
        return None if low is None else (_when(low), _when(high))

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(prices)).scalar_one())

    def points(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        gpus: Sequence[str] | None = None,
        series: PriceSeriesKey | None = None,
        provider: str | None = None,
    ) -> list[StoredPrice]:
        """Stored points, oldest first, filtered by time, canonical GPU names, series or provider."""
        query = select(prices).order_by(prices.c.time_unix_ms, prices.c.id)
        if since is not None:
            query = query.where(prices.c.time_unix_ms >= _ms(since))
        if until is not None:
            query = query.where(prices.c.time_unix_ms <= _ms(until))
        if gpus is not None:
            query = query.where(prices.c.gpu.in_(list(gpus)))
        if series is not None:
            query = query.where(_series_filter(series))
        if provider is not None:
            query = query.where(prices.c.provider == provider)
        with self.engine.connect() as conn:
            return [
                StoredPrice(
                    _key_of(row),
                    _when(row.time_unix_ms),
                    row.price_usd_per_hour,
                    row.gpu,
                    row.gpu_count,
                    row.usd_per_gpu_second,
                    row.source,
                )
                for row in conn.execute(query)
            ]

    def history(self) -> dict[PriceSeriesKey, list[StoredPrice]]:
        """Every series with its points, oldest first (for forecasts and backtests)."""
        grouped: dict[PriceSeriesKey, list[StoredPrice]] = defaultdict(list)
        for point in self.points():
            grouped[point.series].append(point)
        return dict(grouped)

    def series(self, **filters: Any) -> list[SeriesSummary]:
        """One summary per series among :meth:`points` matching ``filters``."""
        grouped: dict[PriceSeriesKey, list[StoredPrice]] = defaultdict(list)
        for point in self.points(**filters):
            grouped[point.series].append(point)
        return [
            SeriesSummary(
                key,
                len(pts),
                pts[0].timestamp,
                pts[-1].timestamp,
                pts[-1].price_usd_per_hour,
                pts[-1].gpu,
                pts[-1].gpu_count,
            )
            for key, pts in sorted(grouped.items())
        ]
