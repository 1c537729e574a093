"""Which market a published trace file records, and the reliability evidence in a folder of them.

The Can't Be Late and SpotHedge files are named ``<zone>_<gpu>_<count>.json``
in folders that name the cloud (``preemption-1node-aws-…``,
``spothedge-gcp-a100``). :data:`TRACE_INSTANCE_TYPES` maps the file's token to
the instance type the traces recorded (from ``shared/data/README.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from spothop.market.availability import AvailabilityTrace
from spothop.market.errors import TraceError
from spothop.market.identity import MarketId
from spothop.market.price_store import GpuLookup, catalog_gpu_lookup
from spothop.market.reliability import WINDOW_S, MarketEvidence, evidence_from_trace
from spothop.market.traces import read_trace

# (provider, file token) → instance type. Source: shared/data/README.md (traces/).
TRACE_INSTANCE_TYPES = {
    ("aws", "v100_1"): "p3.2xlarge",
    ("aws", "v100_8"): "p3.16xlarge",
    ("aws", "k80_1"): "p2.xlarge",
    ("aws", "k80_8"): "p2.8xlarge",
    ("gcp", "c3-88"): "c3-highcpu-88",
    ("gcp", "a100_40gb_8"): "a2-highgpu-8g",
}
_PROVIDER_IN_FOLDER = re.compile(r"(?:^|[-_])(aws|gcp|azure)(?:$|[-_])")
CPU_ONLY = "cpu"  # the GPU label of a market without GPUs


def region_of_zone(zone: str) -> str:
    """``us-east-1a`` → ``us-east-1``; ``us-central1-a`` → ``us-central1``; else the name itself."""
    if re.fullmatch(r".*\d[a-z]", zone):
        return zone[:-1]
    if re.fullmatch(r".*-[a-z]", zone):
        return zone.rsplit("-", 1)[0]
    return zone


def trace_market(path: Path, gpu_lookup: GpuLookup | None = None) -> tuple[MarketId, str]:
    """The market a trace file records and its GPU label (catalog name, else the file's token)."""
    provider = next((m.group(1) for part in reversed(path.parts[:-1])
                     if (m := _PROVIDER_IN_FOLDER.search(part))), None)
    zone, _, token = path.stem.partition("_")
    if provider is None or not token:
        raise TraceError(str(path), "cannot tell the market from the file and folder names",
                         "name it <zone>_<gpu>_<count>.json in a folder naming the cloud (…-aws-…)")
    instance_type = TRACE_INSTANCE_TYPES.get((provider, token), token)
    known = (gpu_lookup or catalog_gpu_lookup())(provider, instance_type)
    gpu = known[0] if known else (token.split("_")[0].upper() if "_" in token else CPU_ONLY)
    return MarketId(provider, region_of_zone(zone), zone, instance_type), gpu


def trace_files(folder: Path) -> list[Path]:
    """Every ``*.json`` trace under ``folder`` (recursively), sorted."""
    if not folder.is_dir():
        raise TraceError(str(folder), "not a folder", "pass a folder of Can't Be Late / SpotHedge traces")
    return sorted(folder.rglob("*.json"))


def evidence_from_traces(paths: Iterable[Path], window_s: float | None = WINDOW_S,
                         gpu_lookup: GpuLookup | None = None) -> list[tuple[MarketEvidence, AvailabilityTrace]]:
    """Each trace file's evidence (its last ``window_s``) beside the trace it came from."""
    lookup = gpu_lookup or catalog_gpu_lookup()
    out = []
    for path in paths:
        market, gpu = trace_market(path, lookup)
        trace = read_trace(path)
        out.append((evidence_from_trace(trace, market, gpu, window_s), trace))
    return out
