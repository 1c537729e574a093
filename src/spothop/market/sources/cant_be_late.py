"""The Can't Be Late and SpotHedge availability traces: which market each file recorded.

Both publish one JSON trace per market, named ``<zone>_<token>.json`` in
folders that name the cloud: ``preemption-1node-aws-2023-04-22/us-east-1c_v100_1.json``,
``spothedge-gcp-a100/us-central1-a_a100_40gb_8.json`` (skypilot-org/spot-traces,
MaoZiming/spothedge_ae). The token names the accelerator and count the
authors asked for; :data:`INSTANCE_TYPES` turns it into the instance type they
rented (from their papers and ``shared/data/README.md``). A zone's region
follows each cloud's naming: AWS ``us-east-1c`` → ``us-east-1``
(:func:`spothop.market.sources.aws.region_of_zone`), GCP ``us-central1-a`` →
``us-central1``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

from spothop.market.errors import TraceError
from spothop.market.sources import aws
from spothop.market.sources.base import TraceSource
from spothop.resources.market_id import MarketId

GCP = "gcp"
# (provider, file token) → instance type.
INSTANCE_TYPES: Mapping[tuple[str, str], str] = {
    (aws.PROVIDER, "v100_1"): "p3.2xlarge",
    (aws.PROVIDER, "v100_8"): "p3.16xlarge",
    (aws.PROVIDER, "k80_1"): "p2.xlarge",
    (aws.PROVIDER, "k80_8"): "p2.8xlarge",
    (GCP, "c3-88"): "c3-highcpu-88",
    (GCP, "a100_40gb_8"): "a2-highgpu-8g",
}


def _gcp_region_of_zone(zone: str) -> str:
    """GCP zones are the region plus ``-<letter>``."""
    region, dash, letter = zone.rpartition("-")
    return region if dash and len(letter) == 1 and letter.isalpha() else zone


REGION_OF_ZONE: Mapping[str, Callable[[str], str]] = {
    aws.PROVIDER: aws.region_of_zone,
    GCP: _gcp_region_of_zone,
}
_CLOUD_IN_FOLDER = re.compile(
    r"(?:^|[-_])(" + "|".join(map(re.escape, REGION_OF_ZONE)) + r")(?:$|[-_])"
)


def _provider(path: Path) -> str | None:
    """The cloud the nearest folder names, or None."""
    return next(
        (m.group(1) for part in reversed(path.parts[:-1]) if (m := _CLOUD_IN_FOLDER.search(part))),
        None,
    )


class CantBeLateTraces(TraceSource):
    """``<zone>_<token>.json`` under a folder naming the cloud (see the module docstring)."""

    name: ClassVar[str] = "cant-be-late"
    description: ClassVar[str] = (
        "Can't Be Late / SpotHedge traces: <zone>_<gpu>_<count>.json in a folder naming the cloud"
    )

    def detect(self, path: Path) -> bool:
        return _parts(path) is not None

    def market(self, path: Path) -> tuple[MarketId, str]:
        parts = _parts(path)
        if parts is None:
            raise TraceError(
                str(path),
                "not a Can't Be Late / SpotHedge trace name",
                "name it <zone>_<gpu>_<count>.json in a folder naming the cloud (…-aws-…)",
            )
        provider, zone, token = parts
        instance_type = INSTANCE_TYPES.get((provider, token), token)
        return MarketId(provider, REGION_OF_ZONE[provider](zone), zone, instance_type), token


def _parts(path: Path) -> tuple[str, str, str] | None:
    """(provider, zone, token) of a trace file's path, or None if it is not named like one."""
    zone, _, token = path.stem.partition("_")
    provider = _provider(path)
    if path.suffix.lower() != ".json" or not zone or not token or provider is None:
        return None
    return provider, zone, token


SOURCES = (CantBeLateTraces(),)
