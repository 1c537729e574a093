"""What a registered source is: one file format, and how it is detected, read and keyed.

Two kinds, one shape:

- :class:`PriceSource` — a price-history format (``spothop market import``):
  ``detect(head)`` says from the file's first bytes whether it is this
  format; ``read(path)`` returns the points it could read and a
  :class:`~spothop.market.price_history.PriceProblem` for each record it
  skipped (with the record's line or number); ``key(point)`` names the point's
  series, with the region taken from the source's own knowledge of its cloud's
  zone names.
- :class:`TraceSource` — a family of published availability traces
  (``spothop market reliability --traces``): ``detect(path)`` says whether a
  file is one of its traces (from its name and folders), ``market(path)`` which
  market the file recorded. Reading the trace itself is generic
  (:func:`spothop.market.traces.read_trace`).

Rules every source keeps: ``detect`` never raises and reads nothing but what
it is given; ``read`` raises :class:`~spothop.market.errors.TraceError` only
for a file it cannot read at all (missing, wrong shape) and otherwise reports
bad records and goes on; names are kept exactly as the cloud spells them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

from spothop.market.identity import PriceSeriesKey
from spothop.market.price_history import PriceImport, PricePoint
from spothop.resources.market_id import MarketId

HEAD_CHARS = 4096  # enough for any header and the first JSON key of every known format


@dataclass(frozen=True)
class FileHead:
    """The first :data:`HEAD_CHARS` characters of a file (a UTF-8 BOM dropped), for detection."""

    path: Path
    text: str

    @classmethod
    def read(cls, path: Path) -> FileHead:
        with path.open(encoding="utf-8-sig", errors="replace") as handle:
            return cls(path, handle.read(HEAD_CHARS))

    @property
    def is_json(self) -> bool:
        return self.text.lstrip().startswith(("{", "["))

    @property
    def csv_columns(self) -> list[str]:
        """The first line split on commas and stripped; ``[]`` for JSON or an empty file."""
        stripped = self.text.lstrip()
        if not stripped or self.is_json:
            return []
        return [column.strip() for column in stripped.splitlines()[0].split(",")]


class PriceSource(ABC):
    """One price-history file format. See the module docstring for the contract."""

    name: ClassVar[str]  # the ``--format`` name, e.g. "aws-csv"
    description: ClassVar[str]  # one line for help text and docs
    provider: ClassVar[str]  # whose prices the format holds, as spothop names the provider
    positions: ClassVar[Literal["line", "record"]]  # what a problem's position counts

    @abstractmethod
    def detect(self, head: FileHead) -> bool:
        """Whether the file that starts with ``head`` is in this format."""

    @abstractmethod
    def read(self, path: Path) -> PriceImport:
        """Every readable point (with its ``line`` or ``record``) and a problem per skipped record."""

    @abstractmethod
    def key(self, point: PricePoint) -> PriceSeriesKey:
        """The series ``point`` belongs to."""


class TraceSource(ABC):
    """One family of published availability traces. See the module docstring for the contract."""

    name: ClassVar[str]
    description: ClassVar[str]

    @abstractmethod
    def detect(self, path: Path) -> bool:
        """Whether ``path`` is one of this family's trace files (from its name and folders)."""

    @abstractmethod
    def market(self, path: Path) -> tuple[MarketId, str]:
        """The market the trace recorded and the file's GPU token (``"v100_1"``)."""
