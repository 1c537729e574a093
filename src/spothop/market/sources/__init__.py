"""The registry of file formats spothop reads market data from: one module per format.

Each module here reads one cloud's or one dataset's files and knows that
cloud's names (its zones' regions, its sizes' spelling); nothing outside this
folder does. A module exposes ``SOURCES``, a tuple of
:class:`~spothop.market.sources.base.PriceSource` or
:class:`~spothop.market.sources.base.TraceSource` instances (the contract is
in :mod:`spothop.market.sources.base`).

**Adding a format** is one file plus one line: write ``sources/<format>.py``
with a ``PriceSource`` subclass and ``SOURCES = (MyFormat(),)``, and add the
module's name to :data:`MODULES`. ``spothop market import`` then detects it,
``--format`` accepts its name, and the help text lists it. Code outside the
package can also call :func:`register` (a plugin's own format).

Detection tries the sources in registration order and takes the first that
claims the file; a file none claims is a :class:`~spothop.market.errors.TraceError`
listing every known format.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from spothop.market.errors import TraceError, require_file
from spothop.market.sources.base import FileHead, PriceSource, TraceSource

# The built-in formats, by module name under this package. One line per format file.
MODULES = (
    "aws",
    "azure",
    "cant_be_late",
)

_price: dict[str, PriceSource] = {}
_trace: dict[str, TraceSource] = {}
_loaded = False


def register(source: PriceSource | TraceSource) -> None:
    """Add a source; a second source with the same name replaces the first (a plugin's fix wins)."""
    if isinstance(source, PriceSource):
        _price[source.name] = source
    else:
        _trace[source.name] = source


def unregister(name: str) -> None:
    """Remove the source called ``name`` (price or trace); no error if there is none."""
    _load()
    _price.pop(name, None)
    _trace.pop(name, None)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in MODULES:
        for source in importlib.import_module(f"{__name__}.{module}").SOURCES:
            register(source)


def price_sources() -> list[PriceSource]:
    """Every price-history format, in detection order."""
    _load()
    return list(_price.values())


def trace_sources() -> list[TraceSource]:
    """Every availability-trace family, in detection order."""
    _load()
    return list(_trace.values())


def price_format_names() -> list[str]:
    """The ``--format`` names, in detection order."""
    return [source.name for source in price_sources()]


def formats_help() -> str:
    """``name (description); ...`` for command-line help."""
    return "; ".join(f"{source.name}: {source.description}" for source in price_sources())


def price_source(name: str, path: Path | None = None) -> PriceSource:
    """The price format called ``name``; TraceError naming the known ones if there is none."""
    _load()
    try:
        return _price[name]
    except KeyError:
        raise TraceError(
            str(path or name),
            f"unknown format {name!r}",
            f"choose one of {', '.join(price_format_names())}",
        ) from None


def claiming_price_source(path: Path) -> PriceSource | None:
    """The first price format that claims the file at ``path`` (which must exist), or None."""
    head = FileHead.read(path)
    return next((source for source in price_sources() if source.detect(head)), None)


def detect_price_source(path: Path) -> PriceSource:
    """The format of the price file at ``path``, from its first bytes; TraceError when none fits."""
    require_file(path)
    source = claiming_price_source(path)
    if source is not None:
        return source
    raise TraceError(
        str(path),
        "unknown price file format",
        f"known formats: {', '.join(price_format_names())}; pass --format to choose one",
    )


def trace_source_of(path: Path) -> TraceSource:
    """The trace family whose naming ``path`` follows; TraceError listing the families when none."""
    for source in trace_sources():
        if source.detect(path):
            return source
    known = "; ".join(f"{s.name} ({s.description})" for s in trace_sources())
    raise TraceError(
        str(path),
        "cannot tell the market from the file and folder names",
        f"known trace names: {known}",
    )


__all__ = [
    "MODULES",
    "FileHead",
    "PriceSource",
    "TraceSource",
    "claiming_price_source",
    "detect_price_source",
    "formats_help",
    "price_format_names",
    "price_source",
    "price_sources",
    "register",
    "trace_source_of",
    "trace_sources",
    "unregister",
]
