"""Where a job may run: the clouds it may use, how it spreads its workers, and pools already paid for.

:class:`ProvidersSpec` (a job's ``providers``: ``allow`` minus ``deny``, never a
cloud in both), :class:`SpreadSpec` (``spread``: at least so many zones and
instance types, where the market allows) and :class:`ReservedSpec` (one entry of
``reserved``: a pool filled before spot or on-demand is bought). The job's own
``regions`` and ``zones`` are fields of :class:`~spothop.jobs.spec.JobSpec`.
Every field is described in ``docs/jobs.md``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from spothop.bounds import INSTANCE_COUNT, Bound
from spothop.jobs.spec_values import PLACE_PATTERN, Name, Place, SpecModel

# Numbers of the placement sections, checked with spothop.bounds (an absurd value names the field):
SPREAD = Bound(1, 100, integer=True)  # no cloud has a hundred zones in reach of one job
RESERVED_COUNT = Bound(1, INSTANCE_COUNT.high, "instances", integer=True)


class ProvidersSpec(SpecModel):
    """Which clouds the job may use: ``allow`` (empty: every configured one) minus ``deny``."""

    allow: list[Name] = Field(default_factory=list)
    deny: list[Name] = Field(default_factory=list)

    @model_validator(mode="after")
    def _disjoint(self) -> ProvidersSpec:
        both = sorted(set(self.allow) & set(self.deny))
        if both:
            raise ValueError(f"{', '.join(both)} is both allowed and denied; keep it in one list")
        return self


class SpreadSpec(SpecModel):
    """Spread workers over at least this many zones and instance types, where the market allows."""

    min_zones: Annotated[int, SPREAD.annotated("min_zones")] = 1
    min_instance_types: Annotated[int, SPREAD.annotated("min_instance_types")] = 1


class ReservedSpec(SpecModel):
    """A pool the user already pays for: filled before spot or on-demand is bought."""

    provider: Name
    instance_type: Annotated[str, Field(pattern=PLACE_PATTERN)]
    zone: Place | None = None
    count: Annotated[int, RESERVED_COUNT.annotated("count")] = 1
