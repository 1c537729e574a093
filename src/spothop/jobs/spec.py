"""The job spec: what a job runs, on what hardware, in which markets, and how it survives.

A job file (YAML) is validated into a frozen :class:`JobSpec`; every field is
described in ``docs/jobs.md``::

    name: embed-reviews
    kind: batch                  # task (default) or batch
    resources: {accelerators: A10G:1, min_gpu_memory_gib: 16}
    workers: 4
    market: spot                 # spot | on-demand | auto
    tolerance: balanced          # aggressive | balanced | conservative
    deadline: 6h
    run: python embed.py
    batch: {inputs: [data/*.jsonl], records_per_shard: 500, output: s3://bucket/out/embed}

Contracts:

1. :func:`load_job` takes a file or a mapping and returns a :class:`JobSpec` or
   raises :class:`~spothop.errors.JobSpecError` (a ``ConfigError``), whose
   message names each bad field's path, the value and what was expected; an
   unknown field or GPU gets "did you mean". It raises nothing else for any
   content (a property test holds it to that); a missing file is a
   ``NotFoundError``.
2. Relative paths (``workdir``, ``batch.inputs``, plain-path or ``file://``
   checkpoint and output URLs) are made absolute against the job file's folder
   (``base_dir`` for a mapping, default the current directory). A stored spec
   (:meth:`JobSpec.to_json`) therefore reads back the same from anywhere.
3. SkyPilot task files are recognised and mapped (``spothop.jobs.skypilot``);
   a SkyPilot key spothop does not support is an error naming it.
4. GPU names are checked against the GPU catalog (``resources/gpus.py``) and
   kept as the catalog spells them: a model's canonical name ("A100-SXM4-80GB")
   or a family ("A100", meaning every variant); ``match_gpus`` expands either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from spothop.batch.spec import DEFAULT_RECORDS_PER_SHARD, RECORDS_PER_SHARD
from spothop.bounds import (
    GPU_MEMORY_GIB,
    INSTANCE_COUNT,
    INSTANCE_GPU_COUNT,
    MEMORY_GIB,
    SECONDS_PER_DAY,
    TFLOPS,
    VCPUS,
    Bound,
)
from spothop.errors import ConfigError, JobSpecError, NotFoundError
from spothop.jobs.spec_messages import spec_error
from spothop.jobs.spec_values import (
    at_least,
    base_dir_of,
    check_envs,
    check_gpu_name,
    check_url,
    env_value,
    not_blank,
    parse_accelerators,
    parse_duration_s,
    resolve_local,
    valid_text,
)
from spothop.queue.model import JOB_NAME_PATTERN
from spothop.resources.offering import Interconnect
from spothop.scheduler.policies import policy_class, policy_names

if TYPE_CHECKING:
    from spothop.resources.compat import CompatNeed
    from spothop.scheduler.requirements import Requirements

# Numbers of a job spec, checked with spothop.bounds (a NaN, an infinity or an absurd value names the field):
NUM_NODES = Bound(1, 1024, "nodes", integer=True)  # the largest training clusters rented on spot
WORKERS = Bound(1, 10_000, "workers", integer=True)  # a batch fleet of thousands of instances
INTERRUPTIONS = Bound(0, 1_000_000, "interruptions", integer=True)
RETRIES = Bound(
    0, 1_000, "retries", integer=True
)  # a worker that failed a thousand times is broken
DEADLINE_S = Bound(0, 365 * SECONDS_PER_DAY, "s", low_open=True)  # at most a year from launch
BUDGET_USD = Bound(0, 100_000_000, "USD", low_open=True)  # USD 100M: beyond any one job
SPREAD = Bound(1, 100, integer=True)  # no cloud has a hundred zones in reach of one job
INTERVAL_S = Bound(0, SECONDS_PER_DAY, "s", low_open=True)  # a checkpoint at least daily
SAVE_COST_S = Bound(0, SECONDS_PER_DAY, "s", low_open=True)
FAILED_SHARDS = Bound(0, 10**9, "shards", integer=True)
RESERVED_COUNT = Bound(1, INSTANCE_COUNT.high, "instances", integer=True)

DEFAULT_SPREAD_WORKERS = 3  # from this many batch workers on, spread over 2 zones and 2 types
NAME_PATTERN = r"^[a-z][a-z0-9-]*$"  # a provider's name, as world files and the registry spell it
PLACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$"  # a region or zone name


class JobKind(StrEnum):
    """``task``: nodes run ``run`` to completion (training, a script); ``batch``: ``workers``
    instances pull shards of ``batch.inputs`` from the queue until it is drained."""

    TASK = "task"
    BATCH = "batch"


class MarketChoice(StrEnum):
    """Which market to buy in: ``auto`` lets the scheduler weigh spot against on-demand."""

    SPOT = "spot"
    ON_DEMAND = "on-demand"
    AUTO = "auto"


class Tolerance(StrEnum):
    """How much interruption risk the job accepts (scheduler/tolerance.py holds the policies)."""

    AGGRESSIVE = "aggressive"
    BALANCED = "balanced"
    CONSERVATIVE = "conservative"


class OnMaxInterruptions(StrEnum):
    """What happens when ``max_interruptions`` is reached."""

    ON_DEMAND = "on-demand"
    FAIL = "fail"


Name = Annotated[str, AfterValidator(valid_text), Field(pattern=NAME_PATTERN, max_length=63)]
Place = Annotated[str, Field(pattern=PLACE_PATTERN)]
Url = Annotated[str, Field(min_length=1), AfterValidator(check_url)]
Command = Annotated[str, AfterValidator(valid_text)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# -- resources --------------------------------------------------------------------------


class _Hardware(_Model):
    """What one node needs: a GPU model and count, or lower bounds on what any GPU offers."""

    accelerators: Annotated[str | None, BeforeValidator(parse_accelerators)] = Field(
        default=None, description="SkyPilot's spelling: NAME:COUNT, e.g. A10G:1"
    )
    gpu: Annotated[str, AfterValidator(check_gpu_name)] | None = None
    gpus_per_node: Annotated[int, INSTANCE_GPU_COUNT.annotated("gpus_per_node")] | None = None
    min_gpu_memory_gib: Annotated[float, GPU_MEMORY_GIB.annotated("min_gpu_memory_gib")] | None = (
        None
    )
    min_tflops: Annotated[float, TFLOPS.annotated("min_tflops")] | None = Field(
        default=None, description="per GPU, the catalog's nominal (dense BF16) figure"
    )
    interconnect: Interconnect | None = None
    cpus: Annotated[float, BeforeValidator(at_least), VCPUS.annotated("cpus")] | None = None
    memory_gib: (
        Annotated[float, BeforeValidator(at_least), MEMORY_GIB.annotated("memory_gib")] | None
    ) = None

    @model_validator(mode="after")
    def _one_gpu_spelling(self) -> _Hardware:
        if self.accelerators is not None and self.gpu is not None:
            raise ValueError(
                "give 'accelerators' (NAME:COUNT) or 'gpu' with 'gpus_per_node', not both"
            )
        if self.accelerators is not None and self.gpus_per_node is not None:
            raise ValueError(
                "'accelerators' already gives the count (NAME:COUNT); drop 'gpus_per_node'"
            )
        return self

    @property
    def gpu_name(self) -> str | None:
        """The GPU asked for (catalog spelling: a model or a family), or None for any GPU."""
        if self.accelerators is not None:
            return self.accelerators.rpartition(":")[0]
        return self.gpu

    @property
    def gpu_count(self) -> int | None:
        """GPUs per node asked for: one where a GPU is named without a count (as in SkyPilot),
        None (any count) where neither a GPU nor a count is given."""
        if self.accelerators is not None:
            return int(self.accelerators.rpartition(":")[2])
        if self.gpus_per_node is None and self.gpu is not None:
            return 1
        return self.gpus_per_node

    def _filters(self) -> dict[str, Any]:
        """This hardware's Requirements fields (GPU name and count are merged by the caller)."""
        return {
            "min_gpu_memory_gib": self.min_gpu_memory_gib,
            "min_tflops_per_gpu": self.min_tflops,
            "interconnect": self.interconnect,
            "min_cpus": self.cpus,
            "min_memory_gib": self.memory_gib,
        }


class AlternativeSpec(_Hardware):
    """One entry of ``resources.any_of``: hardware (and optionally places) the job may run on instead.

    Fields it leaves out are inherited from ``resources``; ``providers``, ``regions``
    and ``zones`` narrow the job's own for this alternative.
    """

    providers: list[Name] | None = None
    regions: list[Place] | None = None
    zones: list[Place] | None = None


class ResourcesSpec(_Hardware):
    """What each node needs. ``any_of``: alternatives, any one of which will do."""

    any_of: list[AlternativeSpec] = Field(default_factory=list)


# -- placement --------------------------------------------------------------------------


class ProvidersSpec(_Model):
    """Which clouds the job may use: ``allow`` (empty: every configured one) minus ``deny``."""

    allow: list[Name] = Field(default_factory=list)
    deny: list[Name] = Field(default_factory=list)

    @model_validator(mode="after")
    def _disjoint(self) -> ProvidersSpec:
        both = sorted(set(self.allow) & set(self.deny))
        if both:
            raise ValueError(f"{', '.join(both)} is both allowed and denied; keep it in one list")
        return self


class SpreadSpec(_Model):
    """Spread workers over at least this many zones and instance types, where the market allows."""

    min_zones: Annotated[int, SPREAD.annotated("min_zones")] = 1
    min_instance_types: Annotated[int, SPREAD.annotated("min_instance_types")] = 1


class ReservedSpec(_Model):
    """A pool the user already pays for: filled before spot or on-demand is bought."""

    provider: Name
    instance_type: Annotated[str, Field(pattern=PLACE_PATTERN)]
    zone: Place | None = None
    count: Annotated[int, RESERVED_COUNT.annotated("count")] = 1


# -- work -------------------------------------------------------------------------------


_REPLICA_PLACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}(/[A-Za-z0-9][A-Za-z0-9._-]{0,99})?")


class CompatibilitySpec(_Model):
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


class CheckpointSpec(_Model):
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


class BatchJobSpec(_Model):
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


# -- the job ----------------------------------------------------------------------------


_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,499}")


def container_image(value: str) -> str:
    """A container image reference (``repo/name:tag`` or ``…@sha256:…``): no spaces, no shell text."""
    if not _IMAGE.fullmatch(value):
        raise ValueError(
            "is not a container image reference: write it as docker pulls it, e.g. "
            "nvcr.io/nvidia/pytorch:24.05-py3 (letters, digits and . _ / : @ + -, no spaces)"
        )
    return value


class JobSpec(_Model):
    """A validated job. Frozen; :meth:`to_json` / :meth:`from_json` round-trip it for the store."""

    name: Annotated[str, Field(pattern=JOB_NAME_PATTERN.pattern)]
    kind: JobKind = JobKind.TASK
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    num_nodes: Annotated[int, NUM_NODES.annotated("num_nodes")] = 1
    # A re-formable task may be relaunched with another group shape (docs/multinode.md): from
    # min_nodes to max_nodes nodes (default: num_nodes), told its new world size.
    reformable: bool = False
    min_nodes: Annotated[int, NUM_NODES.annotated("min_nodes")] | None = None
    max_nodes: Annotated[int, NUM_NODES.annotated("max_nodes")] | None = None
    workers: Annotated[int, WORKERS.annotated("workers")] = 1
    market: MarketChoice = MarketChoice.SPOT
    tolerance: Tolerance = Tolerance.BALANCED
    max_interruptions: Annotated[int, INTERRUPTIONS.annotated("max_interruptions")] | None = None
    on_max_interruptions: OnMaxInterruptions = OnMaxInterruptions.ON_DEMAND
    max_retries: Annotated[int, RETRIES.annotated("max_retries")] = 0
    deadline_s: (
        Annotated[float, BeforeValidator(parse_duration_s), DEADLINE_S.annotated("deadline")] | None
    ) = Field(default=None, alias="deadline")
    # The deadline policy a job with a deadline runs under (scheduler.policies), and its work:
    # how long it runs on one node from start to end (a batch job: all its shards on one worker).
    deadline_policy: str = "spothop"
    work_s: (
        Annotated[float, BeforeValidator(parse_duration_s), DEADLINE_S.annotated("work")] | None
    ) = Field(default=None, alias="work")
    budget_usd: Annotated[float, BUDGET_USD.annotated("budget_usd")] | None = None
    providers: ProvidersSpec = Field(default_factory=ProvidersSpec)
    regions: list[Place] = Field(default_factory=list)
    zones: list[Place] = Field(default_factory=list)
    spread: SpreadSpec = Field(default_factory=SpreadSpec)
    reserved: list[ReservedSpec] = Field(default_factory=list)
    setup: Command | None = None
    run: Annotated[Command, AfterValidator(not_blank)]
    envs: Annotated[
        dict[str, Annotated[str, BeforeValidator(env_value)]], AfterValidator(check_envs)
    ] = Field(default_factory=dict)
    workdir: str | None = None
    image: Annotated[str, AfterValidator(container_image)] | None = None
    checkpoint: CheckpointSpec | None = None
    batch: BatchJobSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_spread(cls, data: Any) -> Any:
        # Never all eggs in one basket: a fleet of 3+ batch workers spreads over 2 zones and 2 types.
        if isinstance(data, Mapping) and "spread" not in data:
            workers = data.get("workers")
            many = (
                data.get("kind") == JobKind.BATCH
                and isinstance(workers, int)
                and not isinstance(workers, bool)
                and workers >= DEFAULT_SPREAD_WORKERS
            )
            data = {**data, "spread": {"min_zones": 2, "min_instance_types": 2} if many else {}}
        return data

    @field_validator("deadline_policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        online = [n for n in policy_names() if policy_class(n).online]
        if value not in online:
            raise ValueError(
                f"{value!r} is not an online deadline policy; choose one of {', '.join(online)}"
            )
        return value

    @field_validator("workdir")
    @classmethod
    def _resolve_workdir(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        base = base_dir_of(info)
        path = resolve_local(valid_text(value), base)
        if "://" in path:
            raise ValueError("workdir is a local folder, uploaded to each node; not a URL")
        if base is not None and not os.path.isdir(path):
            raise ValueError(f"folder {path} does not exist; workdir is relative to the job file")
        return path

    @model_validator(mode="after")
    def _kind_fits(self) -> JobSpec:
        if self.kind is JobKind.BATCH:
            if self.batch is None:
                raise ValueError("a batch job needs a 'batch' section: {inputs, output}")
            if self.num_nodes != 1:
                raise ValueError("num_nodes is for task jobs; a batch job sets 'workers'")
        else:
            if self.batch is not None:
                raise ValueError("'batch' is for batch jobs; add 'kind: batch' or remove it")
            if "workers" in self.model_fields_set and self.workers != 1:
                raise ValueError("workers is for batch jobs; a task job sets 'num_nodes'")
        return self

    @model_validator(mode="after")
    def _group_bounds(self) -> JobSpec:
        given = [f for f in ("min_nodes", "max_nodes") if getattr(self, f) is not None]
        if given and not self.reformable:
            raise ValueError(
                f"{' and '.join(given)} bound a re-formable job; add 'reformable: true' or remove it"
            )
        if self.reformable and self.kind is JobKind.BATCH:
            raise ValueError("reformable is for task jobs; a batch job's workers are independent")
        low, high = self.node_bounds
        if not low <= self.num_nodes <= high:
            raise ValueError(
                f"num_nodes {self.num_nodes} is outside min_nodes..max_nodes ({low}..{high}); "
                "num_nodes is the shape tried first, so it must lie within the bounds"
            )
        return self

    @property
    def node_bounds(self) -> tuple[int, int]:
        """The node counts the job accepts: ``(min_nodes, max_nodes)`` of a re-formable job
        (each defaulting to ``num_nodes``), else ``(num_nodes, num_nodes)``."""
        if not self.reformable:
            return (self.num_nodes, self.num_nodes)
        low = self.min_nodes if self.min_nodes is not None else self.num_nodes
        high = self.max_nodes if self.max_nodes is not None else self.num_nodes
        return (low, high)

    @property
    def grouped(self) -> bool:
        """A task whose nodes run as one group (``torch.distributed``): several nodes, or re-formable.

        Its nodes are launched together, stopped together when any one is lost, and
        relaunched together as the next generation (docs/multinode.md)."""
        return self.kind is JobKind.TASK and (self.num_nodes > 1 or self.reformable)

    @model_validator(mode="after")
    def _spread_fits(self) -> JobSpec:
        count = self.node_count
        for field, wanted in (
            ("min_zones", self.spread.min_zones),
            ("min_instance_types", self.spread.min_instance_types),
        ):
            if wanted > count:
                raise ValueError(
                    f"spread.{field} is {wanted} but the job has only {count} "
                    f"{'workers' if self.kind is JobKind.BATCH else 'nodes'}; lower it"
                )
        if self.grouped and (self.spread.min_zones > 1 or self.spread.min_instance_types > 1):
            raise ValueError(
                "a multi-node task runs as one group on one zone and instance type "
                "(docs/multinode.md); spread is for batch workers: remove it"
            )
        if self.grouped and self.reserved:
            raise ValueError(
                "reserved pools are not used by multi-node tasks yet (docs/multinode.md); "
                "remove 'reserved' or run the job on one node"
            )
        return self

    @property
    def node_count(self) -> int:
        """How many instances the job runs at once, at most: ``workers`` (batch), ``num_nodes``
        (task), or ``max_nodes`` for a re-formable task."""
        return self.workers if self.kind is JobKind.BATCH else self.node_bounds[1]

    def requirements(self) -> Requirements:
        """What the scheduler filters offerings by (``scheduler.Requirements``).

        The job's ``providers``, ``regions`` and ``zones`` are the outer filters.
        Without ``any_of`` the ``resources`` fields are outer filters too. With
        it, each alternative becomes one ``Requirements`` of the
        ``alternatives``: its own fields, the ``resources`` fields it leaves out
        (a GPU it names replaces the job's GPU and count), and its own places,
        which narrow the job's (an offering must pass both).
        """
        from spothop.scheduler.requirements import Requirements

        places: dict[str, Any] = {
            "providers_allow": tuple(self.providers.allow),
            "providers_deny": tuple(self.providers.deny),
            "regions": tuple(self.regions),
            "zones": tuple(self.zones),
        }
        top = self.resources
        if not top.any_of:
            return Requirements(
                gpu=top.gpu_name, gpus_per_node=top.gpu_count, **top._filters(), **places
            )
        alternatives = tuple(_alternative(top, alt) for alt in top.any_of)
        return Requirements(alternatives=alternatives, **places)

    def to_json(self) -> str:
        """The spec as JSON, in the file's field names; :meth:`from_json` reads it back equal."""
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> JobSpec:
        """A spec stored by :meth:`to_json`; :class:`JobSpecError` if it no longer validates."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise spec_error(exc, "stored job spec: ", JobSpec) from None


def _alternative(top: ResourcesSpec, alt: AlternativeSpec) -> Requirements:
    from spothop.scheduler.requirements import Requirements

    gpu: str | None
    count: int | None
    if alt.gpu_name is not None:
        gpu, count = alt.gpu_name, alt.gpu_count
    else:
        gpu = top.gpu_name
        count = alt.gpus_per_node if alt.gpus_per_node is not None else top.gpu_count
    inherited = top._filters()
    own = {k: v for k, v in alt._filters().items() if v is not None}
    return Requirements(
        gpu=gpu,
        gpus_per_node=count,
        **{**inherited, **own},
        providers_allow=tuple(alt.providers or ()),
        regions=tuple(alt.regions or ()),
        zones=tuple(alt.zones or ()),
    )


# -- loading ----------------------------------------------------------------------------


def load_job(source: Mapping[str, Any] | Path | str, base_dir: Path | None = None) -> JobSpec:
    """Validate a job from a YAML file (``Path`` or ``str`` path) or a mapping.

    Relative paths resolve against ``base_dir``, by default the file's folder
    (for a mapping: the current directory). A job without ``name`` loaded from
    a file is named after the file. SkyPilot task files are mapped first.
    Raises :class:`JobSpecError` (field path, value, expectation) or, for a
    missing file, :class:`~spothop.errors.NotFoundError`.
    """
    where = ""
    stem: str | None = None
    if isinstance(source, Path | str):
        path = Path(source)
        where = f"{path}: "
        source = _read_yaml(path, where)
        stem = _name_from(path)
        if base_dir is None:
            base_dir = path.absolute().parent
    if not isinstance(source, Mapping):
        raise JobSpecError(f"{where}a job spec is a mapping of fields, got {type(source).__name__}")
    data: dict[Any, Any] = dict(source)
    if stem is not None and "name" not in data:
        data["name"] = stem
    from spothop.jobs.skypilot import from_skypilot, is_skypilot

    if is_skypilot(data):
        data = from_skypilot(data, where)
    base = Path(base_dir).absolute() if base_dir is not None else Path.cwd()
    try:
        return JobSpec.model_validate(data, context={"base_dir": base})
    except ValidationError as exc:
        raise spec_error(exc, where, JobSpec) from None
    except RecursionError:
        raise JobSpecError(f"{where}the spec is nested too deeply to be a job spec") from None


def _read_yaml(path: Path, where: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotFoundError(
            f"{where}the job file does not exist; give a YAML job spec (docs/jobs.md)"
        ) from None
    except UnicodeDecodeError:
        raise JobSpecError(f"{where}not a text (UTF-8 YAML) file") from None
    except (OSError, ValueError) as exc:
        raise JobSpecError(f"{where}cannot read the job file: {exc}") from None
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise JobSpecError(f"{where}not valid YAML: {exc}") from None


def _name_from(path: Path) -> str | None:
    name = re.sub(r"[^A-Za-z0-9._:=-]+", "-", path.stem).strip("-._:=")[:200]
    return name if name and JOB_NAME_PATTERN.match(name) else None
