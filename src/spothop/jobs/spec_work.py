"""A job's work beyond its command: a task's checkpoints, and a batch job's inputs and output.

- :class:`CheckpointSpec` (a task's ``checkpoint``): the store's URL, the
  interval (``auto``: Young/Daly from the market's preemption rate; stored as
  ``"auto"``), replica stores per region (each another store than the URL), and
  :class:`CompatibilitySpec`, what the checkpoint's state asks of a GPU it moves
  to (checked against ``resources/compat.py``'s matrix when the spec loads).
- :class:`BatchJobSpec` (a batch job's ``batch``): input globs, shard size,
  output URL and how many shards may fail.

Plain paths and ``file://`` URLs are made absolute against the job file's folder
(:mod:`spothop.jobs.spec`'s contract, 2). Every field is described in ``docs/jobs.md``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from spothop.batch.spec import DEFAULT_RECORDS_PER_SHARD, RECORDS_PER_SHARD
from spothop.bounds import GPU_MEMORY_GIB, SECONDS_PER_DAY, Bound
from spothop.errors import ConfigError
from spothop.jobs.spec_values import (
    SpecModel,
    Url,
    base_dir_of,
    not_blank,
    parse_duration_s,
    resolve_local,
    valid_text,
)

if TYPE_CHECKING:
    from spothop.resources.compat import CompatNeed

# Numbers of the work sections, checked with spothop.bounds (an absurd value names the field):
INTERVAL_S = Bound(0, SECONDS_PER_DAY, "s", low_open=True)  # a checkpoint at least daily
SAVE_COST_S = Bound(0, SECONDS_PER_DAY, "s", low_open=True)
FAILED_SHARDS = Bound(0, 10**9, "shards", integer=True)

_REPLICA_PLACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}(/[A-Za-z0-9][A-Za-z0-9._-]{0,99})?")


class CompatibilitySpec(SpecModel):
    """What the checkpoint's state asks of a GPU it moves to (``resources/compat.py``'s rules).

    Unset fields ask nothing beyond the matrix's own rules (same vendor stack,
    the checkpoint's architecture family or newer)."""

    min_architecture: Annotated[str, AfterValidator(not_blank)] | None = Field(
        default=None,
        description="the oldest architecture family the state loads on (default: the "
        "checkpoint's own family)",
    )
    min_compute_capability: Annotated[str, AfterValidator(not_blank)] | None = Field(
        default=None, description="CUDA compute capability the job needs, e.g. '8.0'"
    )
    state_memory_gib: Annotated[float, GPU_MEMORY_GIB.annotated("state_memory_gib")] | None = Field(
        default=None, description="GiB of state one rank keeps on its GPU"
    )

    @model_validator(mode="after")
    def _known(self) -> CompatibilitySpec:
        from spothop.resources.compat import compat_matrix

        try:  # a ValueError is reported with the field's path, like every spec error
            compat_matrix().check_need(self.need())
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    def need(self) -> CompatNeed:
        from spothop.resources.compat import CompatNeed

        return CompatNeed(self.min_architecture, self.min_compute_capability, self.state_memory_gib)


class CheckpointSpec(SpecModel):
    """Where a task's checkpoints go and how often they are taken."""

    url: Url
    interval_s: (
        Annotated[float, BeforeValidator(parse_duration_s), INTERVAL_S.annotated("interval")] | None
    ) = Field(
        default=None,
        alias="interval",
        description="'auto' (Young/Daly from the market's preemption rate) or a duration",
    )
    save_cost_s: Annotated[float, SAVE_COST_S.annotated("save_cost_s")] | None = Field(
        default=None, description="a first guess at one save's seconds; measured from then on"
    )
    replicas: dict[str, Url] = Field(
        default_factory=dict,
        description="a durable store per region ('region' or 'provider/region': URL); durable "
        "saves are copied to each, and a relaunched instance restores from its own region's",
    )
    compatibility: CompatibilitySpec | None = Field(
        default=None,
        description="opt in to the hardware compatibility matrix ({} for its own rules): "
        "placement and restore then keep the checkpoint on GPUs it may move to",
    )

    @field_validator("replicas")
    @classmethod
    def _resolve_replicas(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for place in value:
            if not _REPLICA_PLACE.fullmatch(place):
                raise ValueError(
                    f"replica key {place!r} must be a region or provider/region "
                    "(letters, digits, '.', '_', '-')"
                )
        return {place: resolve_local(url, base_dir_of(info)) for place, url in value.items()}

    @model_validator(mode="after")
    def _replicas_are_other_stores(self) -> CheckpointSpec:
        for place, url in self.replicas.items():
            if url.rstrip("/") == self.url.rstrip("/"):
                raise ValueError(
                    f"replica {place!r} is the checkpoint url itself; name a store in that region"
                )
        return self

    @field_validator("interval_s", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        return None if value == "auto" else value

    @field_validator("url")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        return resolve_local(value, base_dir_of(info))

    @field_serializer("interval_s")
    def _dump_interval(self, value: float | None) -> float | str:
        return "auto" if value is None else value


class BatchJobSpec(SpecModel):
    """A batch job's inputs (globs of JSONL or Parquet files), shard size and output."""

    inputs: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    records_per_shard: Annotated[int, RECORDS_PER_SHARD.annotated("records_per_shard")] = (
        DEFAULT_RECORDS_PER_SHARD
    )
    output: Url
    allow_failed_shards: Annotated[int, FAILED_SHARDS.annotated("allow_failed_shards")] = 0

    @field_validator("inputs")
    @classmethod
    def _resolve_inputs(cls, value: list[str], info: ValidationInfo) -> list[str]:
        return [resolve_local(valid_text(v), base_dir_of(info)) for v in value]

    @field_validator("output")
    @classmethod
    def _resolve_output(cls, value: str, info: ValidationInfo) -> str:
        return resolve_local(value, base_dir_of(info))
