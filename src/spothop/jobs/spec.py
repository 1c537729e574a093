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

import difflib
import os
import re
import types
import typing
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
from spothop.errors import JobSpecError, NotFoundError, UnknownGpuError, ValueOutOfRange
from spothop.queue.model import JOB_NAME_PATTERN
from spothop.resources.gpus import gpu_catalog, normalise_gpu_name
from spothop.resources.offering import Interconnect

if TYPE_CHECKING:
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
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV_PREFIX = "SPOTHOP_"  # the launcher sets SPOTHOP_JOB_ID, SPOTHOP_NODE_RANK, ...
_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)\s*([wdhms]))+\s*$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([wdhms])")
_UNIT_S = {"w": 7 * SECONDS_PER_DAY, "d": SECONDS_PER_DAY, "h": 3600, "m": 60, "s": 1}
_MAX_SHOWN = 80  # characters of a bad value echoed in an error


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


# -- value helpers (each raises ValueError, which pydantic places at the field) ----------


def parse_duration_s(value: Any) -> Any:
    """``"6h"``, ``"90m"``, ``"1h30m"``, ``"2d"``, ``"1w"`` or a number of seconds → seconds.

    Anything else is returned unchanged for the field's bound to refuse.
    """
    if isinstance(value, str):
        if not _DURATION.match(value):
            raise ValueError(
                "not a duration; write it like 6h, 90m, 1h30m, 2d or a number of seconds"
            )
        return sum(float(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(value))
    return value


def _at_least(value: Any) -> Any:
    # SkyPilot writes "4+" for "at least 4"; a spothop minimum means the same.
    if isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*\+?\s*", value):
        return float(value.strip().rstrip("+"))
    return value


def check_gpu_name(name: str) -> str:
    """The catalog's spelling of ``name`` (a model or a family), else ValueError with suggestions."""
    catalog = gpu_catalog()
    model = catalog.lookup(name)
    if model is not None:
        return model.name
    key = normalise_gpu_name(name)
    for family in sorted({m.family for m in catalog}):
        if normalise_gpu_name(family) == key:
            return family
    raise ValueError(str(UnknownGpuError(name, catalog.suggest(name))))


def _accelerators(value: Any) -> Any:
    """``"A10G"``, ``"A10G:2"`` or ``{A10G: 2}`` → ``"A10G:2"`` in the catalog's spelling."""
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise ValueError(
                "give one GPU as NAME:COUNT (e.g. A10G:1); for alternatives use resources.any_of"
            )
        ((name, count),) = value.items()
    elif isinstance(value, str):
        name, _, count_text = value.partition(":")
        count = _count(count_text) if count_text else 1
    else:
        return value  # the str type check refuses it
    if not isinstance(name, str) or not name.strip():
        raise ValueError("give the GPU as NAME:COUNT, e.g. A10G:1")
    count = INSTANCE_GPU_COUNT.check(count, "the GPU count")
    return f"{check_gpu_name(name.strip())}:{count}"


def _count(text: str) -> Any:
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        raise ValueError(f"the GPU count {text!r:.{_MAX_SHOWN}} is not a number") from None


def _no_nul(value: str) -> str:
    """Text a shell command, a path or a stored spec can hold: no NUL, nothing UTF-8 cannot encode."""
    if "\x00" in value:
        raise ValueError("contains a NUL character, which no shell command or path can hold")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid text (a lone surrogate, which UTF-8 cannot hold)") from None
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty; give the command the job runs, e.g. run: python train.py")
    return value


def _env_value(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        raise ValueError("has no value; give one (envs are set on every node)")
    return value


def _check_envs(envs: dict[str, str]) -> dict[str, str]:
    for name, value in envs.items():
        if not ENV_NAME.match(name):
            raise ValueError(
                f"{name!r:.{_MAX_SHOWN}} is not an environment variable name (letters, digits, _)"
            )
        if name.startswith(RESERVED_ENV_PREFIX):
            raise ValueError(
                f"{name!r}: names starting with {RESERVED_ENV_PREFIX} are spothop's own"
            )
        _no_nul(value)
    return envs


def _check_url(value: str) -> str:
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme:
        import fsspec

        known = fsspec.available_protocols()
        if scheme not in known:
            close = difflib.get_close_matches(scheme, known, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}" if close else ""
            raise ValueError(f"unknown storage scheme {scheme!r}{hint} (an fsspec URL or a folder)")
    return _no_nul(value)


def resolve_local(value: str, base_dir: Path | None) -> str:
    """``value`` made absolute against ``base_dir`` when it is a plain path or a ``file://`` URL;
    other URLs (``s3://…``) and absolute paths unchanged. Globs stay globs."""
    prefix = ""
    path = value
    if value.startswith("file://"):
        prefix, path = "file://", value.removeprefix("file://")
    elif "://" in value:
        return value
    path = os.path.expanduser(path)
    if not os.path.isabs(path) and base_dir is not None:
        path = os.path.normpath(os.path.join(base_dir, path))
    return prefix + path


def _base_dir(info: ValidationInfo) -> Path | None:
    context = info.context
    return context.get("base_dir") if isinstance(context, Mapping) else None


Name = Annotated[str, AfterValidator(_no_nul), Field(pattern=NAME_PATTERN, max_length=63)]
Place = Annotated[str, Field(pattern=PLACE_PATTERN)]
Url = Annotated[str, Field(min_length=1), AfterValidator(_check_url)]
Command = Annotated[str, AfterValidator(_no_nul)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# -- resources --------------------------------------------------------------------------


class _Hardware(_Model):
    """What one node needs: a GPU model and count, or lower bounds on what any GPU offers."""

    accelerators: Annotated[str | None, BeforeValidator(_accelerators)] = Field(
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
    cpus: Annotated[float, BeforeValidator(_at_least), VCPUS.annotated("cpus")] | None = None
    memory_gib: (
        Annotated[float, BeforeValidator(_at_least), MEMORY_GIB.annotated("memory_gib")] | None
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

    @field_validator("interval_s", mode="before")
    @classmethod
    def _auto(cls, value: Any) -> Any:
        return None if value == "auto" else value

    @field_validator("url")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        return resolve_local(value, _base_dir(info))

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
        return [resolve_local(_no_nul(v), _base_dir(info)) for v in value]

    @field_validator("output")
    @classmethod
    def _resolve_output(cls, value: str, info: ValidationInfo) -> str:
        return resolve_local(value, _base_dir(info))


# -- the job ----------------------------------------------------------------------------


class JobSpec(_Model):
    """A validated job. Frozen; :meth:`to_json` / :meth:`from_json` round-trip it for the store."""

    name: Annotated[str, Field(pattern=JOB_NAME_PATTERN.pattern)]
    kind: JobKind = JobKind.TASK
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    num_nodes: Annotated[int, NUM_NODES.annotated("num_nodes")] = 1
    workers: Annotated[int, WORKERS.annotated("workers")] = 1
    market: MarketChoice = MarketChoice.SPOT
    tolerance: Tolerance = Tolerance.BALANCED
    max_interruptions: Annotated[int, INTERRUPTIONS.annotated("max_interruptions")] | None = None
    on_max_interruptions: OnMaxInterruptions = OnMaxInterruptions.ON_DEMAND
    max_retries: Annotated[int, RETRIES.annotated("max_retries")] = 0
    deadline_s: (
        Annotated[float, BeforeValidator(parse_duration_s), DEADLINE_S.annotated("deadline")] | None
    ) = Field(default=None, alias="deadline")
    budget_usd: Annotated[float, BUDGET_USD.annotated("budget_usd")] | None = None
    providers: ProvidersSpec = Field(default_factory=ProvidersSpec)
    regions: list[Place] = Field(default_factory=list)
    zones: list[Place] = Field(default_factory=list)
    spread: SpreadSpec = Field(default_factory=SpreadSpec)
    reserved: list[ReservedSpec] = Field(default_factory=list)
    setup: Command | None = None
    run: Annotated[Command, AfterValidator(_not_blank)]
    envs: Annotated[
        dict[str, Annotated[str, BeforeValidator(_env_value)]], AfterValidator(_check_envs)
    ] = Field(default_factory=dict)
    workdir: str | None = None
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

    @field_validator("workdir")
    @classmethod
    def _resolve_workdir(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        base = _base_dir(info)
        path = resolve_local(_no_nul(value), base)
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
        return self

    @property
    def node_count(self) -> int:
        """How many instances the job runs at once: ``workers`` (batch) or ``num_nodes`` (task)."""
        return self.workers if self.kind is JobKind.BATCH else self.num_nodes

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
            raise _spec_error(exc, "stored job spec: ") from None


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
        raise _spec_error(exc, where) from None
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


def _spec_error(exc: ValidationError, where: str) -> JobSpecError:
    problems = [_describe(error) for error in exc.errors()]
    return JobSpecError(where + "; ".join(f"{p}: {m}" for p, m in problems), problems)


def _describe(error: Any) -> tuple[str, str]:
    loc = tuple(error["loc"])
    path = ".".join(str(part) for part in loc) or "(top level)"
    kind = error["type"]
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind == "missing":
        return path, "missing; " + _MISSING_HINT.get(str(loc[-1]), "this field is required")
    if kind == "extra_forbidden":
        return path, _unknown_field(loc)
    bounded = isinstance(error.get("ctx", {}).get("error"), ValueOutOfRange)
    value = error.get("input")
    if bounded or isinstance(value, Mapping | list) or "got" in message:
        return path, message  # the message names the value, or the value is a whole section
    return path, f"{message}, got {value!r:.{_MAX_SHOWN}}"


_MISSING_HINT = {
    "name": "give the job a name (letters, digits, . _ : = -)",
    "run": "give the command the job runs, e.g. run: python train.py",
    "url": "give a folder or an fsspec URL such as s3://bucket/prefix",
    "output": "give a folder or an fsspec URL for the shards' outputs",
    "inputs": "give a list of files or globs, e.g. [data/*.jsonl]",
}


def _unknown_field(loc: tuple[Any, ...]) -> str:
    model = _model_at(loc[:-1])
    key = loc[-1]
    if model is None:
        return "unknown field"
    known = sorted(f.alias or name for name, f in model.model_fields.items())
    close = difflib.get_close_matches(str(key), known, n=1) if isinstance(key, str) else []
    if close:
        return f"unknown field; did you mean {close[0]!r}?"
    return f"unknown field; the fields here are {', '.join(known)}"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that the fields at ``loc`` (a pydantic error's location) belong to."""
    model: type[BaseModel] | None = JobSpec
    for part in loc:
        if model is None:
            return None
        if isinstance(part, int):
            continue  # an item of a list: the same model as the list's
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        model = _model_in(field.annotation) if field is not None else None
    return model


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (list, typing.Union, types.UnionType, Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
