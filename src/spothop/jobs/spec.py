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
3. SkyPilot task files and dstack task configurations are recognised and
   mapped (``spothop.jobs.skypilot``, ``spothop.jobs.dstack``); a key spothop
   does not take is an error naming it and what spothop does instead.
4. GPU names are checked against the GPU catalog (``resources/gpus.py``) and
   kept as the catalog spells them: a model's canonical name ("A100-SXM4-80GB")
   or a family ("A100", meaning every variant); ``match_gpus`` expands either.

The spec's sections are models of their own modules, exported here with it:
``spec_resources`` (what each node needs), ``spec_placement`` (clouds, spread,
reserved pools), ``spec_work`` (checkpoints, batch inputs and output);
``spec_values`` holds the value checks and field types they share, and
``spec_messages`` how a validation error reads.
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
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from spothop.bounds import SECONDS_PER_DAY, Bound
from spothop.errors import JobSpecError, NotFoundError
from spothop.jobs.spec_messages import spec_error
from spothop.jobs.spec_mounts import check_file_mounts
from spothop.jobs.spec_placement import ProvidersSpec, ReservedSpec, SpreadSpec
from spothop.jobs.spec_resources import AlternativeSpec, ResourcesSpec
from spothop.jobs.spec_values import (
    ENV_NAME,
    Command,
    Place,
    SpecModel,
    base_dir_of,
    check_envs,
    container_image,
    env_value,
    not_blank,
    parse_duration_s,
    resolve_local,
    valid_text,
)
from spothop.jobs.spec_work import BatchJobSpec, CheckpointSpec, CompatibilitySpec
from spothop.queue.model import JOB_NAME_PATTERN
from spothop.scheduler.policies import policy_class, policy_names

if TYPE_CHECKING:
    from spothop.scheduler.requirements import Requirements

__all__ = [
    "AlternativeSpec",
    "BatchJobSpec",
    "CheckpointSpec",
    "CompatibilitySpec",
    "JobKind",
    "JobSpec",
    "MarketChoice",
    "OnMaxInterruptions",
    "ProvidersSpec",
    "ReservedSpec",
    "ResourcesSpec",
    "SpreadSpec",
    "Tolerance",
    "container_image",
    "job_name_from",
    "load_job",
    "parse_job_text",
    "read_job_file",
]

# Numbers of a job spec, checked with spothop.bounds (a NaN, an infinity or an absurd value names the field):
NUM_NODES = Bound(1, 1024, "nodes", integer=True)  # the largest training clusters rented on spot
WORKERS = Bound(1, 10_000, "workers", integer=True)  # a batch fleet of thousands of instances
INTERRUPTIONS = Bound(0, 1_000_000, "interruptions", integer=True)
RETRIES = Bound(
    0, 1_000, "retries", integer=True
)  # a worker that failed a thousand times is broken
DEADLINE_S = Bound(0, 365 * SECONDS_PER_DAY, "s", low_open=True)  # at most a year from launch
BUDGET_USD = Bound(0, 100_000_000, "USD", low_open=True)  # USD 100M: beyond any one job

DEFAULT_SPREAD_WORKERS = 3  # from this many batch workers on, spread over 2 zones and 2 types


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


# -- the job ----------------------------------------------------------------------------


class JobSpec(SpecModel):
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
    # The names of the job's secrets (spec_secrets): their values are never part of the spec.
    secrets: list[Annotated[str, Field(pattern=ENV_NAME.pattern)]] = Field(default_factory=list)
    _secret_values: dict[str, str] = PrivateAttr(default_factory=dict)
    workdir: str | None = None
    file_mounts: dict[str, str] = Field(default_factory=dict)
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
        if base is not None and os.path.exists(path) and not os.path.isdir(path):
            raise ValueError(f"{path} is a file, not a folder; workdir is the job's code folder")
        if base is not None and not os.path.isdir(path):
            raise ValueError(f"folder {path} does not exist; workdir is relative to the job file")
        return path

    @field_validator("file_mounts", mode="before")
    @classmethod
    def _check_file_mounts(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise ValueError("a mapping {DEST: SOURCE}, e.g. {/data: ./data, ~/model: s3://b/m}")
        return check_file_mounts(value, base_dir_of(info))

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

    @model_validator(mode="after")
    def _image_id_fits(self) -> JobSpec:
        image = self.resources.image_id
        if image is None:
            return self
        if len(self.providers.allow) != 1:
            raise ValueError(
                "resources.image_id is one cloud's machine image: name that cloud alone in "
                "providers.allow (SkyPilot: resources.cloud), or run in a container "
                "(image: IMAGE; SkyPilot: image_id: docker:IMAGE)"
            )
        if isinstance(image, dict):
            missing = [r for r in self.regions if r not in image]
            if missing:
                raise ValueError(
                    f"resources.image_id names no image for region {missing[0]}; give one for "
                    "each region the job may run in"
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
        it (or ``ordered``: the same, in preference order), each alternative becomes one
        ``Requirements`` of the
        ``alternatives``: its own fields, the ``resources`` fields it leaves out
        (a GPU it names replaces the job's GPU and count), and its own places,
        which narrow the job's (an offering must pass both).
        """
        from spothop.scheduler.requirements import Requirements

        image = self.resources.image_id
        places: dict[str, Any] = {
            "providers_allow": tuple(self.providers.allow),
            "providers_deny": tuple(self.providers.deny),
            # A machine image per region: only the regions that have one.
            "regions": tuple(self.regions or (image if isinstance(image, dict) else ())),
            "zones": tuple(self.zones),
        }
        top = self.resources
        if not top.alternatives:
            return Requirements(
                gpu=top.gpu_name, gpus_per_node=top.gpu_count, **top._filters(), **places
            )
        alternatives = tuple(_alternative(top, alt) for alt in top.alternatives)
        return Requirements(alternatives=alternatives, ordered=bool(top.ordered), **places)

    @property
    def secret_values(self) -> dict[str, str]:
        """The values of the job's secrets, as ``load_job`` read them (empty for a spec read
        back from the store, which never holds them: :mod:`spothop.jobs.spec_secrets`)."""
        return dict(self._secret_values)

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
        market=alt.market,
    )


# -- loading ----------------------------------------------------------------------------


def load_job(
    source: Mapping[str, Any] | Path | str,
    base_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
    secrets: Mapping[str, str] | None = None,
    *,
    paths_here: bool = True,
) -> JobSpec:
    """Validate a job from a YAML file (``Path`` or ``str`` path) or a mapping.

    Relative paths resolve against ``base_dir``, by default the file's folder
    (for a mapping: the current directory). A job without ``name`` loaded from
    a file is named after the file. ``env`` (``launch --env NAME=VALUE``) goes
    over the file's ``envs``, filling the values it leaves for the user; ``secrets``
    (``launch --secret NAME=VALUE``) over its ``secrets`` the same way, their values held
    apart from the spec (:mod:`spothop.jobs.spec_secrets`). SkyPilot
    task files are mapped first. Raises :class:`JobSpecError` (field path,
    value, expectation) or, for a missing file, :class:`~spothop.errors.NotFoundError`.

    ``paths_here`` False (a spec sent to the server: its paths are the client's machine's,
    made absolute there): local paths are neither resolved nor looked for on this disk.
    """
    where = ""
    stem: str | None = None
    if isinstance(source, Path | str):
        path = Path(source)
        where = f"{path}: "
        source = read_job_file(path)
        stem = job_name_from(path)
        if base_dir is None:
            base_dir = path.absolute().parent
    if not isinstance(source, Mapping):
        raise JobSpecError(f"{where}a job spec is a mapping of fields, got {type(source).__name__}")
    data: dict[Any, Any] = dict(source)
    if stem is not None and "name" not in data:
        data["name"] = stem
    from spothop.jobs.dstack import from_dstack, is_dstack
    from spothop.jobs.skypilot import apply_env_overrides, from_skypilot, is_skypilot
    from spothop.jobs.spec_secrets import take_secrets

    data, secret_values = take_secrets(data, secrets or {}, where, launch_env=env)
    if is_dstack(data):
        data = from_dstack(data, where, env)
    else:
        data = apply_env_overrides(data, env or {})
        if is_skypilot(data):
            data = from_skypilot(data, where)
    base = Path(base_dir).absolute() if base_dir is not None else Path.cwd()
    try:
        spec = JobSpec.model_validate(data, context={"base_dir": base if paths_here else None})
    except ValidationError as exc:
        raise spec_error(exc, where, JobSpec) from None
    except RecursionError:
        raise JobSpecError(f"{where}the spec is nested too deeply to be a job spec") from None
    spec._secret_values = secret_values
    return spec


def read_job_file(path: Path) -> Any:
    """What the YAML job file at ``path`` holds (one document), as ``load_job`` reads it;
    :class:`JobSpecError` when it is not one readable YAML document, ``NotFoundError`` when
    it does not exist."""
    return _read_yaml(path, f"{path}: ")


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
    return parse_job_text(text, where)


def parse_job_text(text: str, where: str) -> Any:
    """What a job file's YAML ``text`` holds (one document, or None when empty);
    :class:`JobSpecError`, prefixed with ``where``, when it is not valid YAML or holds several
    documents (a SkyPilot chain: one job per file)."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        where_in_text = " ".join(str(exc).split())  # PyYAML's marks span lines: one line here
        raise JobSpecError(f"{where}not valid YAML: {where_in_text}") from None
    if len(documents) > 1:
        raise JobSpecError(
            f"{where}holds {len(documents)} YAML documents (a SkyPilot chain or pipeline of "
            "tasks): spothop runs one job per file; give each task a file of its own and "
            "launch them in turn"
        )
    return documents[0] if documents else None


def job_name_from(path: Path) -> str | None:
    """The job name a file's stem gives (``train-v2.yaml`` → ``train-v2``), or None when nothing
    of the stem is a valid name; the name a spec without ``name`` takes."""
    name = re.sub(r"[^A-Za-z0-9._:=-]+", "-", path.stem).strip("-._:=")[:200]
    return name if name and JOB_NAME_PATTERN.match(name) else None
