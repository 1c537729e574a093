"""Which market a published trace file records, and the reliability evidence in a folder of them.

How a family of traces names its markets (its files' and folders' names) is
that family's registered trace source (:func:`spothop.market.sources.trace_sources`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from spothop.market.availability import AvailabilityTrace
from spothop.market.errors import TraceError, TraceNotFound
from spothop.market.price_store import GpuLookup, catalog_gpu_lookup
from spothop.market.reliability import WINDOW_S, MarketEvidence, evidence_from_trace
from spothop.market.sources import trace_source_of
from spothop.market.traces import read_trace
from spothop.resources.market_id import MarketId

CPU_ONLY = "cpu"  # the GPU label of a market without GPUs


def trace_market(path: Path, gpu_lookup: GpuLookup | None = None) -> tuple[MarketId, str]:
    """The market a trace file records (from the trace source whose naming it follows) and its GPU
    label: the catalog's name for the instance type, else the file's token (``v100_1`` → ``V100``)."""
    market, token = trace_source_of(path).market(path)
    known = (gpu_lookup or catalog_gpu_lookup())(market.provider, market.instance_type)
    gpu = known[0] if known else (token.split("_")[0].upper() if "_" in token else CPU_ONLY)
    return market, gpu


def trace_files(folder: Path) -> list[Path]:
    """Every ``*.json`` trace under ``folder`` (recursively), sorted."""
    fix = "pass a folder of Can't Be Late / SpotHedge traces"
    if not folder.exists():
        raise TraceNotFound(str(folder), "no such folder", fix)
    if not folder.is_dir():
        raise TraceError(str(folder), "not a folder", fix)
    return sorted(folder.rglob("*.json"))


def evidence_from_traces(
    paths: Iterable[Path], window_s: float | None = WINDOW_S, gpu_lookup: GpuLookup | None = None
) -> list[tuple[MarketEvidence, AvailabilityTrace]]:
    """Each trace file's evidence (its last ``window_s``) beside the trace it came from."""
    lookup = gpu_lookup or catalog_gpu_lookup()
    out = []
    for path in paths:
        market, gpu = trace_market(path, lookup)
        trace = read_trace(path)
        out.append((evidence_from_trace(trace, market, gpu, window_s), trace))
    return out
