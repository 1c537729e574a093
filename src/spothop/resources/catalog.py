"""The catalog: every offering spothop knows, from the built-in files and the user's imports.

Catalog files are CSV, one row per (provider, region, zone, instance type),
prices per instance-hour in the cloud's own currency::

    provider,region,zone,instance_type,gpu,gpu_count,vcpus,memory_gib,local_disk_gib,
    network_bandwidth_gbps,interconnect,currency,on_demand_price,spot_price,price_date

Lines starting with ``#`` before the header are comments (sources, dates).
An empty ``zone`` means the price holds for the whole region; an empty
``spot_price`` means the cloud has no spot market for that type.

Reading is forgiving row by row and strict within a row: a malformed row
becomes a :class:`~spothop.errors.CatalogRowError` naming file, line and field,
and every other row still loads.
"""

from __future__ import annotations

import csv
import datetime as dt
import difflib
import io
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spothop.bounds import (
    DISK_GIB,
    GPU_MEMORY_GIB,
    INSTANCE_GPU_COUNT,
    MEMORY_GIB,
    NETWORK_GBPS,
    PRICE_ORIGINAL_PER_HOUR,
    TFLOPS,
    USD_PER_GPU_HOUR,
    VCPUS,
    Bound,
    check_datetime,
)
from spothop.errors import CatalogError, CatalogRowError, ConfigError, SpothopError
from spothop.paths import atomic_write_text, path_under, plain_name, user_catalog_dir
from spothop.resources.currency import RateTable, load_rates, rate_override_paths
from spothop.resources.gpus import match_gpus, resolve_gpu
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Interconnect, Offering

log = logging.getLogger("spothop.resources")

COLUMNS = (
    "provider",
    "region",
    "zone",
    "instance_type",
    "gpu",
    "gpu_count",
    "vcpus",
    "memory_gib",
    "local_disk_gib",
    "network_bandwidth_gbps",
    "interconnect",
    "currency",
    "on_demand_price",
    "spot_price",
    "price_date",
)


@dataclass
class LoadResult:
    """What reading catalog files gave: the offerings, and each row that was refused."""

    offerings: list[Offering] = field(default_factory=list)
    errors: list[CatalogRowError] = field(default_factory=list)

    def extend(self, other: LoadResult) -> None:
        self.offerings.extend(other.offerings)
        self.errors.extend(other.errors)


def _number(bound: Bound, column: str) -> Callable[[str], float]:
    """A parser for a required number in ``bound`` (NaN, infinities and absurd sizes refused)."""
    return lambda value: float(bound.check(float(value), column))


def _optional_number(bound: Bound, column: str) -> Callable[[str], float | None]:
    return lambda value: _number(bound, column)(value) if value.strip() else None


def _count(value: str) -> int:
    return int(INSTANCE_GPU_COUNT.check(int(value), "gpu_count"))


def _date(value: str) -> dt.date:
    return check_datetime(dt.date.fromisoformat(value.strip()), "price_date")


def offering_from_row(row: dict[str, str], rates: RateTable, source: str) -> Offering:
    """Build one offering from a CSV row; raises ``(field, reason)`` as a ValueError."""
    values: dict[str, object] = {}
    for name, parse in _ROW_PARSERS:
        raw = row.get(name) or ""
        try:
            values[name] = parse(raw)
        except (ValueError, SpothopError) as exc:
            raise _FieldError(name, f"{raw!r} is not valid: {exc}") from None
    currency = str(values["currency"])
    od, spot = values["on_demand_price"], values["spot_price"]
    assert od is None or isinstance(od, float)
    assert spot is None or isinstance(spot, float)
    try:
        od_usd = None if od is None else rates.to_usd(od, currency)
        spot_usd = None if spot is None else rates.to_usd(spot, currency)
    except SpothopError as exc:
        raise _FieldError("currency", str(exc)) from None
    fields = {
        **{k: v for k, v in values.items() if k not in ("on_demand_price", "spot_price")},
        "zone": values["zone"] or None,
        "on_demand_price_usd_per_hour": od_usd,
        "spot_price_usd_per_hour": spot_usd,
        "on_demand_price_original": od,
        "spot_price_original": spot,
        "source": source,
    }
    try:
        return Offering.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"]) or None
        raise _FieldError(_CSV_NAME.get(loc or "", loc), first["msg"]) from None


class _FieldError(ValueError):
    def __init__(self, field_name: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field_name = field_name
        self.reason = reason


def _required(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("required")
    return value


def _canonical_gpu(value: str) -> str:
    return resolve_gpu(_required(value)).name


_ROW_PARSERS: Sequence[tuple[str, Callable[[str], object]]] = (
    ("provider", lambda v: _required(v).lower()),
    ("region", _required),
    ("zone", str.strip),
    ("instance_type", _required),
    ("gpu", _canonical_gpu),
    ("gpu_count", _count),
    ("vcpus", _number(VCPUS, "vcpus")),
    ("memory_gib", _number(MEMORY_GIB, "memory_gib")),
    ("local_disk_gib", _optional_number(DISK_GIB, "local_disk_gib")),
    ("network_bandwidth_gbps", _optional_number(NETWORK_GBPS, "network_bandwidth_gbps")),
    ("interconnect", lambda v: Interconnect(v.strip().lower()).value),
    ("currency", lambda v: _required(v).upper()),
    ("on_demand_price", _optional_number(PRICE_ORIGINAL_PER_HOUR, "on_demand_price")),
    ("spot_price", _optional_number(PRICE_ORIGINAL_PER_HOUR, "spot_price")),
    ("price_date", _date),
)

# Offering field names back to the CSV column a user sees.
_CSV_NAME = {
    "on_demand_price_usd_per_hour": "on_demand_price",
    "spot_price_usd_per_hour": "spot_price",
}


def csv_header(reader: csv.DictReader[str], origin: str, skipped: int = 0) -> list[str]:
    """The header of ``reader`` (after ``skipped`` lines); csv's own errors become :class:`CatalogError`."""
    try:
        return list(reader.fieldnames or [])
    except csv.Error as exc:
        raise CatalogError(f"{origin}:{skipped + 1}: the header is not CSV ({exc})") from None


def csv_rows(
    reader: csv.DictReader[str], origin: str, skipped: int = 0
) -> Iterator[tuple[int, dict[Any, Any]]]:
    """``(line, row)`` for each row after the header; a row csv itself cannot read (a field over its
    size limit) is a :class:`CatalogError` naming the line, since the rows after it cannot be trusted."""
    try:
        for index, row in enumerate(reader):
            yield skipped + 2 + index, row
    except csv.Error as exc:
        raise CatalogError(
            f"{origin}:{skipped + reader.line_num + 1}: not readable as CSV ({exc})"
        ) from None


def read_catalog_text(text: str, origin: str, rates: RateTable | None = None) -> LoadResult:
    """Parse catalog CSV text; ``origin`` (a file name) appears in every error."""
    rates = rates or load_rates()
    lines = text.splitlines()
    skip = 0
    while skip < len(lines) and (lines[skip].startswith("#") or not lines[skip].strip()):
        skip += 1
    if skip == len(lines):
        raise CatalogError(f"{origin}: no header line; expected columns {', '.join(COLUMNS)}")
    reader = csv.DictReader(io.StringIO("\n".join(lines[skip:])))
    header = [h.strip() for h in csv_header(reader, origin, skip)]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise CatalogError(
            f"{origin}:{skip + 1}: header lacks {', '.join(missing)}; "
            f"a spothop catalog has columns {', '.join(COLUMNS)} "
            "(for SkyPilot files use `spothop catalog import --format skypilot`)"
        )
    result = LoadResult()
    for line, row in csv_rows(reader, origin, skip):
        if None in row:
            result.errors.append(
                CatalogRowError(
                    origin,
                    line,
                    None,
                    f"{len(header) + len(row[None])} fields, expected {len(header)}",
                )
            )
            continue
        if None in row.values():  # csv fills the columns a short row lacks with None
            given = sum(value is not None for value in row.values())
            result.errors.append(
                CatalogRowError(
                    origin, line, None, f"{given} fields, expected {len(header)}: a truncated row"
                )
            )
            continue
        try:
            result.offerings.append(offering_from_row(row, rates, source=origin))
        except _FieldError as exc:
            result.errors.append(CatalogRowError(origin, line, exc.field_name, exc.reason))
    return result


def read_catalog_file(path: Path, rates: RateTable | None = None) -> LoadResult:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CatalogError(f"cannot read catalog {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{path}: not a text file (byte {exc.start} is not UTF-8); a catalog is CSV text"
        ) from None
    return read_catalog_text(text, str(path), rates)


def read_catalog_path(path: Path, rates: RateTable | None = None) -> LoadResult:
    """A catalog file, or every ``*.csv`` file in a folder (a folder named ``x.csv`` is no file: skipped)."""
    if path.is_dir():
        result = LoadResult()
        for child in sorted(path.glob("*.csv")):
            if child.is_file():
                result.extend(read_catalog_file(child, rates))
        return result
    return read_catalog_file(path, rates)


def format_catalog_csv(offerings: Iterable[Offering], comment: str = "") -> str:
    """Write offerings back as catalog CSV (prices in their original currency)."""
    out = io.StringIO()
    for line in comment.splitlines():
        out.write(f"# {line}\n")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for o in offerings:
        writer.writerow(
            [
                o.provider,
                o.region,
                o.zone or "",
                o.instance_type,
                o.gpu,
                o.gpu_count,
                _num(o.vcpus),
                _num(o.memory_gib),
                _num(o.local_disk_gib),
                _num(o.network_bandwidth_gbps),
                o.interconnect.value,
                o.currency,
                _num(o.on_demand_price_original),
                _num(o.spot_price_original),
                o.price_date.isoformat(),
            ]
        )
    return out.getvalue()


def _num(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


# -- the catalog spothop uses ----------------------------------------------


@cache
def _builtin_result() -> LoadResult:
    folder = importlib_resources.files("spothop.resources").joinpath("data/catalog")
    result = LoadResult()
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".csv"):
            result.extend(
                read_catalog_text(entry.read_text(encoding="utf-8"), f"builtin:{entry.name}")
            )
    return result


def builtin_offerings() -> list[Offering]:
    """The offerings shipped in the package. A bad built-in row is our bug: it fails loudly."""
    result = _builtin_result()
    if result.errors:
        overrides = [str(path) for path in rate_override_paths() if path.exists()]
        if overrides:
            raise CatalogError(
                f"the exchange rates in {', '.join(overrides)} make built-in prices absurd "
                f"({result.errors[0]}); check the rates there (USD per one unit of the currency)"
            )
        raise CatalogError(
            "built-in catalog is malformed: " + "; ".join(map(str, result.errors[:5]))
        )
    return list(result.offerings)


class Catalog:
    """Offerings keyed by (provider, region, zone, instance type); later sources win.

    ``refused`` holds the rows of the user's imported files that did not load (each names its
    file, line and field): the rest of the catalog is still there, and the command line reports them.
    """

    def __init__(
        self, offerings: Iterable[Offering] = (), refused: Sequence[CatalogRowError] = ()
    ) -> None:
        self._by_key: dict[MarketId, Offering] = {}
        self.refused = list(refused)
        self.add(offerings)

    def add(self, offerings: Iterable[Offering]) -> None:
        for offering in offerings:
            self._by_key[offering.market_id] = offering

    def __len__(self) -> int:
        return len(self._by_key)

    def __iter__(self) -> Iterator[Offering]:
        return iter(self._by_key.values())

    @property
    def offerings(self) -> list[Offering]:
        return list(self._by_key.values())

    @property
    def providers(self) -> list[str]:
        return sorted({o.provider for o in self._by_key.values()})

    def get(
        self, provider: str, region: str, zone: str | None, instance_type: str
    ) -> Offering | None:
        return self._by_key.get(MarketId.of(provider, region, zone, instance_type))

    def with_measurements(self, lookup: Callable[[str, str], float | None]) -> Catalog:
        """A copy whose offerings carry the probe's measured TFLOPS where there is one."""
        return Catalog(
            (o.with_measured_tflops(lookup(o.provider, o.instance_type)) for o in self),
            self.refused,
        )

    def query(self, query: OfferQuery) -> list[Offering]:
        return query.apply(self._by_key.values())


def load_catalog(include_user: bool = True, measured: bool = True) -> Catalog:
    """The catalog spothop decides with: built-in, with each imported provider replacing its rows.

    With ``measured``, offerings carry the compute probe's figures where one
    has run on their instance type. A malformed row of an imported file is
    left out and kept in :attr:`Catalog.refused` (logged too); the other rows load.
    """
    offerings = builtin_offerings()
    folder = _user_folder()
    refused: list[CatalogRowError] = []
    if include_user and folder.is_dir():
        result = read_catalog_path(folder)
        for error in result.errors:
            log.warning(
                "imported catalog row skipped: %s (re-run `spothop catalog import` or fix the file)",
                error,
            )
        refused = result.errors
        # An import is a provider's whole catalog: it replaces the built-in rows of that provider.
        imported = {o.provider for o in result.offerings}
        offerings = [o for o in offerings if o.provider not in imported] + result.offerings
    catalog = Catalog(offerings, refused)
    if measured:
        from spothop.resources.measured import measured_tflops

        catalog = catalog.with_measurements(measured_tflops)
    return catalog


def _user_folder() -> Path:
    folder = user_catalog_dir()
    if folder.exists() and not folder.is_dir():
        raise CatalogError(
            f"{folder} is a file, but imported catalogs are kept in a folder there; move the file away"
        )
    return folder


def save_user_offerings(provider: str, offerings: Sequence[Offering], comment: str) -> Path:
    """Replace the user's imported catalog for one provider; returns the file written.

    ``provider`` must be a plain name (it names the file, under ``$SPOTHOP_HOME/catalog``). Every
    offering is written only if it reads back as it was written, so a saved file always loads:
    an offering that would not raises :class:`CatalogRowError` and nothing is written.
    """
    path = path_under(_user_folder(), f"{plain_name(provider, 'provider')}.csv")
    text = format_catalog_csv(offerings, comment)
    check = read_catalog_text(text, str(path))
    if check.errors:
        raise check.errors[0]
    atomic_write_text(path, text)
    return path


# -- querying ----------------------------------------------------------------


class SortKey:
    GPU_HOUR = "price"
    EFFECTIVE_TFLOPS_HOUR = "tflops"
    CHOICES = (GPU_HOUR, EFFECTIVE_TFLOPS_HOUR)


@dataclass(frozen=True)
class OfferQuery:
    """What a user asks of the catalog. Every filter is optional; prices are per GPU-hour.

    ``spot`` chooses the market whose prices filter and sort: spot (offerings
    without a spot market drop out) or on-demand.
    """

    gpu: str | None = None
    count: int | None = None
    min_gpu_memory_gib: float | None = None
    min_tflops: float | None = None
    interconnect: str | None = None
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    spot: bool = True
    max_usd_per_gpu_hour: float | None = None
    sort: str = SortKey.GPU_HOUR
    limit: int | None = None

    def __post_init__(self) -> None:
        # The command line's flag names: a bad value is reported as the user typed it.
        for flag, value, bound in (
            ("--count", self.count, INSTANCE_GPU_COUNT),
            ("--min-gpu-memory", self.min_gpu_memory_gib, GPU_MEMORY_GIB),
            ("--min-tflops", self.min_tflops, TFLOPS),
            ("--max-price", self.max_usd_per_gpu_hour, USD_PER_GPU_HOUR),
        ):
            if value is not None:
                bound.check(value, flag)
        if self.limit is not None and self.limit < 1:
            raise ConfigError(
                f"--limit must be at least 1 (leave it out to see every row), got {self.limit}"
            )
        if self.sort not in SortKey.CHOICES:
            raise ConfigError(
                f"--sort must be one of {', '.join(SortKey.CHOICES)}, got {self.sort!r}"
            )
        if self.interconnect is not None:
            try:
                Interconnect(self.interconnect.lower())
            except ValueError:
                choices = ", ".join(i.value for i in Interconnect)
                raise ConfigError(
                    f"--interconnect must be one of {choices}, got {self.interconnect!r}"
                ) from None

    def apply(self, offerings: Iterable[Offering]) -> list[Offering]:
        gpus = {m.name for m in match_gpus(self.gpu)} if self.gpu else None
        kept = [o for o in offerings if self._keeps(o, gpus)]
        kept.sort(key=self._sort_key)
        return kept[: self.limit] if self.limit else kept

    def _keeps(self, o: Offering, gpus: set[str] | None) -> bool:
        per_gpu_hour = o.usd_per_gpu_hour(self.spot)
        checks = (
            per_gpu_hour is not None,
            gpus is None or o.gpu in gpus,
            self.count is None or o.gpu_count == self.count,
            self.min_gpu_memory_gib is None or o.gpu_memory_gib >= self.min_gpu_memory_gib,
            self.min_tflops is None or o.effective_tflops_per_gpu >= self.min_tflops,
            self.interconnect is None or o.interconnect.value == self.interconnect.lower(),
            not self.providers or o.provider in {p.strip().lower() for p in self.providers},
            not self.regions or o.region.lower() in {r.strip().lower() for r in self.regions},
            self.max_usd_per_gpu_hour is None
            or (per_gpu_hour is not None and per_gpu_hour <= self.max_usd_per_gpu_hour),
        )
        return all(checks)

    def _sort_key(self, o: Offering) -> tuple[float, str, str, str, str]:
        value = (
            o.usd_per_gpu_hour(self.spot)
            if self.sort == SortKey.GPU_HOUR
            else o.usd_per_effective_tflops_hour(self.spot)
        )
        return (
            value if value is not None else float("inf"),
            o.provider,
            o.region,
            o.zone or "",
            o.instance_type,
        )


def check_names(query: OfferQuery, offerings: Iterable[Offering]) -> None:
    """Raise :class:`ConfigError` for a provider or region no offering has, with suggestions.

    For the command line: an unknown name there is a typo far more often than an
    empty market. Library callers that want an empty answer simply skip this.
    """
    offerings = list(offerings)
    _check_known("provider", query.providers, {o.provider for o in offerings})
    _check_known("region", query.regions, {o.region for o in offerings})


def _check_known(what: str, asked: Sequence[str], known: set[str]) -> None:
    lowered = {k.lower(): k for k in known}
    for name in asked:
        if name.strip().lower() in lowered:
            continue
        close = difflib.get_close_matches(name.strip().lower(), list(lowered), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(lowered[c]) for c in close)}?" if close else ""
        if what == "provider":
            fix = f"known: {', '.join(sorted(known))}"
        else:
            fix = "regions are spelled as the cloud spells them (us-east-1, cn-hangzhou); `spothop offers --json` shows each offering's"
        raise ConfigError(f"--{what} {name!r} is in no offering of the catalog{hint}; {fix}")
