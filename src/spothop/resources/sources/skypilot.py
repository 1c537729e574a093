"""Import SkyPilot catalog files (``vms.csv``) into spothop's catalog.

SkyPilot's catalogs differ per cloud in column order (AWS puts ``GpuInfo``
before ``Price``, Lambda after ``Region``, Vast before ``Price``) but share
column *names*, so rows are read by name, never by position. The differences
that matter:

- ``GpuInfo`` is a Python literal (``{'Gpus': [{'Name': 'H100', 'Count': 1,
  'MemoryInfo': {'SizeInMiB': 81559}}], ...}``), read with ``ast.literal_eval``;
  its memory size settles which variant a family name means ("A100" with
  81,920 MiB is the 80 GB part).
- GCP prices a GPU VM as the VM row (``n1-standard-8``) plus a separate
  accelerator row (empty ``InstanceType``, ``AcceleratorName`` and per-zone
  price). Each accelerator row becomes one offering on the n1 host that GCP's
  own console suggests for it (see :func:`_gcp_host_for`), named
  ``{host}+{count}x{accelerator}``; A2/A3/G2 rows already carry their GPUs.
- Lambda has no spot market (empty ``SpotPrice``); Vast writes ``0.00``,
  which also means no spot price.
- Files have CRLF line endings, which :mod:`csv` handles.

Every row ends up either imported or refused with its reason (a CPU-only
instance type, an unknown GPU, a bad price), so an import accounts for the
whole file.
"""

from __future__ import annotations

import ast
import csv
import datetime as dt
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spothop.bounds import INSTANCE_GPU_COUNT, MEMORY_GIB, PRICE_USD_PER_HOUR, VCPUS
from spothop.errors import CatalogError, CatalogRowError, SpothopError, ValueOutOfRange
from spothop.paths import plain_name
from spothop.resources.catalog import csv_header, csv_rows, format_catalog_csv, read_catalog_text
from spothop.resources.currency import RateTable, load_rates
from spothop.resources.gpus import GpuModel, gpu_catalog, resolve_gpu
from spothop.resources.market_id import MarketId
from spothop.resources.offering import Interconnect, Offering

REQUIRED_COLUMNS = (
    "InstanceType",
    "AcceleratorName",
    "AcceleratorCount",
    "vCPUs",
    "MemoryGiB",
    "Price",
    "Region",
)

MIB_PER_GIB = 1024


@dataclass
class ImportReport:
    """One file's import: offerings made, and every row refused with its reason."""

    path: str
    provider: str
    rows: int = 0
    offerings: list[Offering] = field(default_factory=list)
    refused: list[CatalogRowError] = field(default_factory=list)

    @property
    def accounted(self) -> int:
        """Rows that became an offering or were refused; equals ``rows`` when all are accounted."""
        return len(self.offerings) + len(self.refused)

    def to_dict(self, saved_to: Path | None = None) -> dict[str, Any]:
        """JSON-ready: counts, every refused row (line, field, reason) and where it was saved."""
        return {
            "path": self.path,
            "provider": self.provider,
            "rows": self.rows,
            "imported": len(self.offerings),
            "refused": [
                {
                    "line": e.line,
                    "field": e.field,
                    "reason": e.reason,
                    "out_of_scope": e.out_of_scope,
                }
                for e in self.refused
            ],
            "saved_to": str(saved_to) if saved_to else None,
        }


@dataclass(frozen=True)
class _Row:
    line: int
    data: dict[str, str]

    def get(self, name: str) -> str:
        return (self.data.get(name) or "").strip()


def provider_from_path(path: Path) -> str:
    """SkyPilot keeps one folder per cloud (``lambda/vms.csv``): the folder names the provider."""
    return path.parent.name.lower() if path.name == "vms.csv" else path.stem.lower()


def import_skypilot_file(
    path: Path,
    provider: str | None = None,
    price_date: dt.date | None = None,
    rates: RateTable | None = None,
) -> ImportReport:
    """Read one SkyPilot ``vms.csv``; see the module docstring for its dialects."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise CatalogError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{path}: not a text file (byte {exc.start} is not UTF-8); give a SkyPilot vms.csv"
        ) from None
    if provider is None:
        provider = plain_name(
            provider_from_path(path), f"the provider taken from {path} (give --provider NAME)"
        )
    return import_skypilot_text(text, str(path), provider, price_date, rates)


def import_skypilot_text(
    text: str,
    origin: str,
    provider: str,
    price_date: dt.date | None = None,
    rates: RateTable | None = None,
) -> ImportReport:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = csv_header(reader, origin)
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise CatalogError(
            f"{origin}:1: not a SkyPilot vms.csv: header lacks {', '.join(missing)} (found {', '.join(header) or 'nothing'})"
        )
    provider = plain_name(provider, "provider (--provider)")
    context = _Context(origin, provider, price_date or dt.date.today(), rates or load_rates())
    report = ImportReport(path=origin, provider=provider)
    every_row = [_Row(line=line, data=row) for line, row in csv_rows(reader, origin)]
    report.rows = len(every_row)
    rows: list[_Row] = []
    for row in every_row:
        # csv gives a short row's missing columns as None and a long row's extra fields under None.
        if None in row.data or None in row.data.values():
            extra = row.data.get(None) or ()  # type: ignore[call-overload]
            given = sum(v is not None for k, v in row.data.items() if k is not None) + len(extra)
            report.refused.append(
                CatalogRowError(
                    origin,
                    row.line,
                    None,
                    f"{given} fields, the header has {len(header)}: a truncated or misquoted row",
                )
            )
        else:
            rows.append(row)
    hosts = _gcp_hosts(rows)
    seen: dict[MarketId, int] = {}
    for row in rows:
        try:
            offering = context.offering(row, hosts)
            context.check_storable(row, offering)
        except CatalogRowError as exc:
            report.refused.append(exc)
            continue
        first = seen.setdefault(offering.market_id, row.line)
        if first != row.line:
            report.refused.append(
                CatalogRowError(
                    origin,
                    row.line,
                    None,
                    f"duplicate of line {first} (same region, zone and instance type)",
                )
            )
            continue
        report.offerings.append(offering)
    return report


def iter_skypilot_paths(paths: list[Path]) -> Iterator[Path]:
    """Files as given, and ``*/vms.csv`` under any folder given."""
    for path in paths:
        if path.is_dir():
            yield from sorted(path.glob("**/vms.csv"))
        else:
            yield path


# -- one row ---------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    origin: str
    provider: str
    price_date: dt.date
    rates: RateTable

    def refuse(
        self, row: _Row, column: str | None, reason: str, *, out_of_scope: bool = False
    ) -> CatalogRowError:
        return CatalogRowError(self.origin, row.line, column, reason, out_of_scope=out_of_scope)

    def offering(self, row: _Row, hosts: dict[tuple[str, float], _Row]) -> Offering:
        accelerator = row.get("AcceleratorName")
        instance_type = row.get("InstanceType")
        if not accelerator:
            raise self.refuse(
                row,
                "AcceleratorName",
                f"CPU-only instance type {instance_type!r}: spothop catalogs GPU offerings",
                out_of_scope=True,
            )
        count = self.number(row, "AcceleratorCount")
        gpu = self.gpu(row, accelerator, instance_type)
        vm_price = 0.0
        vm_spot: float | None = 0.0
        if not instance_type:  # a GCP accelerator row: price it on its host VM
            if gpu.family not in GCP_N1_ATTACHABLE_FAMILIES:
                raise self.refuse(
                    row,
                    "InstanceType",
                    f"GCP accelerator row for {accelerator}: GCP attaches it only to its own machine types "
                    "(A2, A3, G2, ...), whose rows carry it; only "
                    f"{', '.join(sorted(GCP_N1_ATTACHABLE_FAMILIES))} attach to an n1 host",
                    out_of_scope=True,
                )
            host = _gcp_host_for(hosts, row.get("AvailabilityZone"), int(count))
            if host is None:
                raise self.refuse(
                    row,
                    "InstanceType",
                    f"GCP accelerator row for {accelerator} has no n1 host VM in zone {row.get('AvailabilityZone')!r}",
                )
            instance_type = f"{host.get('InstanceType')}+{int(count)}x{accelerator}"
            vm_price = self.number(host, "Price")
            vm_spot = self.optional_price(host, "SpotPrice")
            vcpus, memory = self.number(host, "vCPUs"), self.number(host, "MemoryGiB")
        else:
            vcpus, memory = self.number(row, "vCPUs"), self.number(row, "MemoryGiB")
        price = self.number(row, "Price") + vm_price
        spot = self.optional_price(row, "SpotPrice")
        spot_total = None if spot is None or vm_spot is None else spot + vm_spot
        try:
            return Offering(
                provider=self.provider,
                region=row.get("Region"),
                zone=row.get("AvailabilityZone") or None,
                instance_type=instance_type,
                gpu=gpu.name,
                gpu_count=int(count),
                vcpus=vcpus,
                memory_gib=memory,
                interconnect=infer_interconnect(gpu, int(count)),
                on_demand_price_usd_per_hour=self.rates.to_usd(price, "USD"),
                spot_price_usd_per_hour=spot_total,
                currency="USD",
                on_demand_price_original=price,
                spot_price_original=spot_total,
                price_date=self.price_date,
                source=f"{self.origin}:{row.line}",
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise self.refuse(row, ".".join(map(str, first["loc"])) or None, first["msg"]) from None

    def number(self, row: _Row, column: str) -> float:
        """A finite number in the column's bound (:data:`COLUMN_BOUNDS`), else the row is refused."""
        raw = row.get(column)
        try:
            value = float(raw)
        except ValueError:
            raise self.refuse(row, column, f"expected a number, got {raw!r}") from None
        if column == "Price" and value == 0:
            raise self.refuse(row, column, "on-demand price of 0: a free GPU is a catalog error")
        try:
            return float(COLUMN_BOUNDS[column].check(value, column))
        except ValueOutOfRange as exc:
            raise self.refuse(row, column, str(exc)) from None

    def check_storable(self, row: _Row, offering: Offering) -> None:
        """Refuse an offering that the saved catalog file could not load back (an empty region, ...).

        The import is saved as a spothop catalog, read on every ``offers``: a row that file would
        refuse is refused here, with its SkyPilot line, instead of being saved."""
        back = read_catalog_text(format_catalog_csv([offering]), self.origin, self.rates)
        if back.errors:
            error = back.errors[0]
            raise self.refuse(
                row, _SKYPILOT_COLUMN.get(error.field or "", error.field), error.reason
            )

    def optional_price(self, row: _Row, column: str) -> float | None:
        # Lambda leaves SpotPrice empty; Vast writes 0.00. Both mean "no spot market".
        if not row.get(column):
            return None
        value = self.number(row, column)
        return value if value > 0 else None

    def gpu(self, row: _Row, accelerator: str, instance_type: str) -> GpuModel:
        memory_gib = _gpu_memory_gib(row.get("GpuInfo"), self.number(row, "AcceleratorCount"))
        hint = _form_factor_hint(instance_type)
        try:
            model = resolve_gpu(accelerator, memory_gib)
            named = _model_named_by(instance_type, model.family)
            if named is not None:
                return named
            if hint and model.form_factor != hint:
                # "gpu_1x_h100_pcie": the instance type names the board the accelerator name does not.
                for spelling in (f"{model.family}-{hint}", f"{accelerator}-{hint}"):
                    try:
                        alt = resolve_gpu(spelling, memory_gib)
                    except SpothopError:
                        continue
                    if alt.form_factor == hint and alt.family == model.family:
                        return alt
            return model
        except SpothopError as exc:
            raise self.refuse(row, "AcceleratorName", str(exc)) from None


# Each number a row may carry, with the range it must be in (spothop.bounds; 0 is allowed where
# SkyPilot writes it to mean "none", as Vast's SpotPrice does).
COLUMN_BOUNDS = {
    "AcceleratorCount": INSTANCE_GPU_COUNT,
    "vCPUs": VCPUS,
    "MemoryGiB": MEMORY_GIB,
    "Price": PRICE_USD_PER_HOUR,
    "SpotPrice": PRICE_USD_PER_HOUR,
}

# spothop catalog columns back to the SkyPilot column a user sees in the file.
_SKYPILOT_COLUMN = {
    "region": "Region",
    "zone": "AvailabilityZone",
    "instance_type": "InstanceType",
    "vcpus": "vCPUs",
    "memory_gib": "MemoryGiB",
    "gpu_count": "AcceleratorCount",
    "on_demand_price": "Price",
    "spot_price": "SpotPrice",
    "gpu": "AcceleratorName",
}


def _gpu_memory_gib(gpu_info: str, count: float) -> float | None:
    """Memory per GPU from ``GpuInfo``.

    The field is ambiguous upstream: Lambda's ``SizeInMiB`` is per GPU, Vast's
    is the whole machine's (and both write the same number as the "total").
    Read as per GPU unless that matches no known GPU and the size divided by
    the count does.
    """
    if not gpu_info:
        return None
    try:
        info: Any = ast.literal_eval(gpu_info)
        size_gib = float(info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]) / MIB_PER_GIB
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError, AttributeError):
        return None
    if count > 1 and not _any_gpu_has(size_gib) and _any_gpu_has(size_gib / count):
        return size_gib / count
    return size_gib


def _any_gpu_has(memory_gib: float) -> bool:
    return any(abs(m.memory_gib - memory_gib) <= 0.1 * m.memory_gib for m in gpu_catalog())


def _model_named_by(instance_type: str, family: str) -> GpuModel | None:
    """A variant of ``family`` that the instance type spells out ("2x-H100_NVL-32-65536")."""
    gpus = gpu_catalog()
    for spelling in (instance_type, *instance_type.split("-")):
        model = gpus.lookup(spelling)
        if model is not None and model.family == family:
            return model
    return None


def _form_factor_hint(instance_type: str) -> str | None:
    lowered = instance_type.lower()
    if "pcie" in lowered:
        return "PCIe"
    if "sxm" in lowered:
        return "SXM"
    return None


def infer_interconnect(gpu: GpuModel, count: int) -> Interconnect:
    """What links the GPUs of an instance when a catalog does not say.

    One GPU links to nothing. Eight SXM boards sit on an HGX baseboard with
    NVSwitch; two or four SXM boards share NVLink. AMD's OAM parts link over
    Infinity Fabric (xGMI). Anything else talks through PCIe.
    """
    if count == 1:
        return Interconnect.NONE
    if gpu.form_factor == "SXM":
        return Interconnect.NVSWITCH if count >= 8 else Interconnect.NVLINK
    if gpu.form_factor == "OAM":
        return Interconnect.XGMI
    return Interconnect.PCIE


# -- GCP's separately priced accelerators ------------------------------------

# GCP's console pairs an attached GPU with an n1-standard host of this many
# vCPUs per GPU (its default for T4, P4, V100, P100; the documented maximum for
# one T4 is 24 vCPUs, so 8 per GPU fits every accelerator).
GCP_VCPUS_PER_ATTACHED_GPU = 8

# The GPU families GCP attaches to N1 VMs (GCP "GPU platforms" docs: T4, P4, V100,
# P100, and K80 until its retirement). A100, L4, H100 and newer come only inside
# A2/G2/A3/A4 machine types, so an accelerator row for them is no n1 offering.
GCP_N1_ATTACHABLE_FAMILIES = frozenset({"T4", "P4", "V100", "P100", "K80"})


def _gcp_hosts(rows: list[_Row]) -> dict[tuple[str, float], _Row]:
    hosts: dict[tuple[str, float], _Row] = {}
    for row in rows:
        name = row.get("InstanceType")
        if name.startswith("n1-standard-") and not row.get("AcceleratorName"):
            try:
                hosts.setdefault((row.get("AvailabilityZone"), float(row.get("vCPUs"))), row)
            except ValueError:
                continue
    return hosts


def _gcp_host_for(hosts: dict[tuple[str, float], _Row], zone: str, count: int) -> _Row | None:
    return hosts.get((zone, float(GCP_VCPUS_PER_ATTACHED_GPU * count)))
