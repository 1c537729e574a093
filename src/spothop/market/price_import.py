"""Price files → records for the store, through the registered formats (:mod:`spothop.market.sources`).

The format is the one named (``--format``) or the one detected from the
file's first bytes; a name or a file no source knows raises
:class:`~spothop.market.errors.TraceError` listing the known formats.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from spothop.market.identity import PriceSeriesKey
from spothop.market.price_history import PriceProblem
from spothop.market.sources import detect_price_source, price_source
from spothop.market.sources.base import PriceSource


@dataclass(frozen=True)
class PriceRecord:
    """One price point bound for the store; ``line``/``record`` say where it came from."""

    series: PriceSeriesKey
    timestamp: datetime
    price_usd_per_hour: float
    source: str = ""
    line: int | None = None
    record: int | None = None


def resolve_format(path: Path, fmt: str | None) -> PriceSource:
    """The source named ``fmt``, or the detected one when ``fmt`` is None."""
    return detect_price_source(path) if fmt is None else price_source(fmt, path)


def read_price_file(
    path: str | Path, fmt: str | None = None
) -> tuple[list[PriceRecord], list[PriceProblem]]:
    """Read a price file of any registered format into records and the problems met.

    The records keep the file's order (the store reports out-of-order points from it).
    """
    path = Path(path)
    source = resolve_format(path, fmt)
    imported = source.read(path)
    records = [
        PriceRecord(
            source.key(p),
            p.timestamp,
            p.price_usd_per_hour,
            str(path),
            line=p.line,
            record=p.record,
        )
        for p in imported.points
    ]
    return records, list(imported.problems)
