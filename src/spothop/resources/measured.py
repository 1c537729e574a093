"""Measured figures: probe results kept per (provider, instance type), to stand in for nominal ones.

The catalog ranks offerings by TFLOPS per dollar. The vendor's figure is a
peak; once ``spothop probe --record aws/p5.48xlarge`` has run on an instance,
:func:`measured_tflops` gives what that instance type really did, and the
catalog uses it instead.

Storage: ``$SPOTHOP_HOME/measured.json`` (default ``~/.spothop``), one JSON
document ``{"version": 1, "records": [...]}``; each record holds the provider
and instance type exactly as the cloud spells them, when it was recorded, and
the whole :class:`ProbeResult`. Writes go to a temporary file in the same
folder and are moved into place with ``os.replace``, so a reader never sees a
half-written file. Two probes recording at the same instant may lose one of
the two records (last writer wins); probes are minutes apart in practice.

Combining samples: each record's TFLOPS is already the median of its own
timed runs; records are combined as a mean weighted by those run counts, so a
probe with ten timed runs counts ten times as much as one cut to a single run
by its budget.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from spothop.bounds import TFLOPS, Bound
from spothop.errors import ConfigError, SpothopError, ValueOutOfRange
from spothop.paths import atomic_write_text, spothop_home
from spothop.resources.probe import Backend, Dtype, ProbeResult

MEASURED_FILE = "measured.json"
FORMAT_VERSION = 1
MEASURED_TFLOPS = Bound(
    0, TFLOPS.high, TFLOPS.unit, low_open=True
)  # a figure of 0 is no measurement
MEASURED_GBPS = Bound(0, 1_000_000, "GB/s", low_open=True)  # HBM3e is ~8,000 GB/s
RUN_COUNT = Bound(1, 1_000_000, "runs", integer=True)


class MeasuredRecord(BaseModel):
    """One probe run recorded for an instance type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: str
    instance_type: str
    recorded_at: datetime
    result: ProbeResult


class _MeasuredFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = FORMAT_VERSION
    records: list[MeasuredRecord] = []


def measured_path() -> Path:
    return spothop_home() / MEASURED_FILE


def record_probe(provider: str, instance_type: str, result: ProbeResult) -> MeasuredRecord:
    """Add ``result`` to the store for (provider, instance type) and return the record.

    Only GPU results are recorded: the store answers "what does one GPU of this
    instance type deliver", and a CPU figure would silently replace a GPU's.
    """
    if not provider.strip() or not instance_type.strip():
        raise ConfigError(
            f"record needs a provider and an instance type; got {provider!r}/{instance_type!r}"
        )
    if result.backend is not Backend.TORCH_CUDA:
        raise ConfigError(
            f"this probe ran on {result.device_name} (backend {result.backend.value}), not a GPU; "
            f"recording it for {provider}/{instance_type} would replace a per-GPU figure with a CPU one"
        )
    _check_figures(result, "probe result")  # never write what the next read would refuse
    path = measured_path()
    record = MeasuredRecord(
        provider=provider, instance_type=instance_type, recorded_at=datetime.now(UTC), result=result
    )
    _save(path, _MeasuredFile(records=[*_load(path).records, record]))
    return record


def measured_tflops(provider: str, instance_type: str) -> float | None:
    """Measured dense TFLOPS of one GPU of this instance type, or ``None`` if never probed.

    BF16 when any record has it, else FP16, else FP32 (as ``GpuModel.nominal_tflops``
    chooses); several records are combined as a mean weighted by timed runs.
    """
    records = [
        r
        for r in _load(measured_path()).records
        if (r.provider, r.instance_type) == (provider, instance_type)
    ]
    for dtype in Dtype:
        key = f"{dtype.value}_tflops"
        weighted = [
            (value, r.result.samples.get(key, 1))
            for r in records
            if (value := r.result.tflops(dtype)) is not None
        ]
        if weighted:
            total = sum(weight for _, weight in weighted)
            return sum(value * weight for value, weight in weighted) / total
    return None


def all_measurements() -> list[MeasuredRecord]:
    """Every record, oldest first."""
    return sorted(_load(measured_path()).records, key=lambda r: r.recorded_at)


# Reading the file: the catalog asks once per offering, so keep the parse until the file changes.
_cache: dict[Path, tuple[tuple[int, int], _MeasuredFile]] = {}


def _load(path: Path) -> _MeasuredFile:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return _MeasuredFile()
    except OSError as exc:
        raise SpothopError(f"{path}: cannot read ({exc.strerror})") from None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _cache.get(path)
    if cached and cached[0] == stamp:
        return cached[1]  # shared: callers read it and never mutate it
    data = _parse(path)
    _cache[path] = (stamp, data)
    return data


def _parse(path: Path) -> _MeasuredFile:
    fix = "delete it to start afresh (it holds only probe results; `spothop probe --record` writes them again)"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise SpothopError(f"{path}: cannot read the measured figures ({exc}); {fix}") from None
    except json.JSONDecodeError as exc:
        raise SpothopError(
            f"{path}: not valid JSON (line {exc.lineno}: {exc.msg}); {fix}"
        ) from None
    if not isinstance(raw, dict) or raw.get("version") != FORMAT_VERSION:
        version = raw.get("version") if isinstance(raw, dict) else None
        raise SpothopError(
            f"{path}: expected a measured-figures file of version {FORMAT_VERSION}, got {version!r}; {fix}"
        )
    try:
        data = _MeasuredFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise SpothopError(f"{path}: malformed record at {where}: {first['msg']}; {fix}") from None
    for index, record in enumerate(data.records):
        try:
            _check_figures(record.result, f"records.{index}.result")
        except ValueOutOfRange as exc:
            raise SpothopError(f"{path}: malformed record: {exc}; {fix}") from None
    return data


def _check_figures(result: ProbeResult, where: str) -> None:
    """The figures the catalog ranks by: finite TFLOPS and bandwidths above 0, run counts of at least 1
    (a NaN or a negative figure would sort an offering first; a zero weight would divide by zero)."""
    for dtype in Dtype:
        value = result.tflops(dtype)
        if value is not None:
            MEASURED_TFLOPS.check(value, f"{where}.{dtype.value}_tflops")
    for name in ("memory_bandwidth_gbps", "h2d_bandwidth_gbps"):
        value = getattr(result, name)
        if value is not None:
            MEASURED_GBPS.check(value, f"{where}.{name}")
    for key, runs in result.samples.items():
        RUN_COUNT.check(runs, f"{where}.samples.{key}")


def _save(path: Path, data: _MeasuredFile) -> None:
    atomic_write_text(path, data.model_dump_json(indent=2))
    _cache.pop(path, None)
