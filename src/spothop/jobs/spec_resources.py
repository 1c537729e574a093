"""A job's ``resources``: what each node needs, as a GPU model and count or bounds, and alternatives.

:class:`ResourcesSpec` (the job's ``resources``) and :class:`AlternativeSpec`
(one entry of its ``any_of``) share the hardware fields of ``_Hardware``:

- a GPU is named as SkyPilot spells it (``accelerators: A10G:1``) or as ``gpu``
  with ``gpus_per_node``, never both; :attr:`~_Hardware.gpu_name` and
  :attr:`~_Hardware.gpu_count` read either (a GPU named without a count means one);
- GPU names are checked against the GPU catalog and kept as it spells them
  (:mod:`spothop.jobs.spec`'s contract, 4);
- the other fields are lower bounds that any offering must meet
  (``_filters`` gives them as :class:`~spothop.scheduler.requirements.Requirements`
  fields; :meth:`spothop.jobs.spec.JobSpec.requirements` merges them).

Every field is described in ``docs/jobs.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from spothop.bounds import GPU_MEMORY_GIB, INSTANCE_GPU_COUNT, MEMORY_GIB, TFLOPS, VCPUS, Bound
from spothop.jobs.spec_values import (
    Name,
    Place,
    SpecModel,
    accelerator_choices,
    at_least,
    check_gpu_name,
    parse_accelerators,
)
from spothop.providers.base import DiskSpec, DiskTier
from spothop.resources.offering import Interconnect

# An instance type as the clouds spell them: g5.xlarge, a2-highgpu-1g, ecs.gn7i-c8g1.2xlarge,
# Standard_NC24ads_A100_v4 (letters, digits and . _ -).
INSTANCE_TYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_instance_type(value: str) -> str:
    """An instance type's name as a cloud spells it, or ValueError saying what one looks like."""
    if not INSTANCE_TYPE.fullmatch(value):
        raise ValueError(
            "is not an instance type's name: write it as the cloud spells it, e.g. g5.xlarge "
            "or a2-highgpu-1g (letters, digits and . _ -, no spaces)"
        )
    return value


# A cloud's machine image: ami-0abc…, projects/p/global/images/family/f, m-bp1…, ubuntu_22_04.
IMAGE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,299}")


def check_image_id(value: str) -> str:
    """A cloud's machine image id, or ValueError saying what one looks like."""
    if not IMAGE_ID.fullmatch(value):
        raise ValueError(
            "is not a machine image id: write it as the cloud spells it, e.g. "
            "ami-0123456789abcdef0 or projects/P/global/images/NAME (no spaces)"
        )
    return value


def machine_image(value: Any) -> Any:
    """``resources.image_id``: one machine image id, or ``{region: id}``; ValueError otherwise."""
    if isinstance(value, Mapping):
        if not value:
            raise ValueError("an empty mapping; give {REGION: IMAGE_ID}, one per region")
        for region, image in value.items():
            if not isinstance(image, str):
                raise ValueError(f"region {region!r:.80}: an image id, got {image!r:.80}")
            check_image_id(image)
        return dict(value)
    if not isinstance(value, str):
        raise ValueError(f"an image id or {{REGION: IMAGE_ID}}, got {value!r:.80}")
    return check_image_id(value)


DISK_SIZE_GIB = Bound(1, 65_536, "GiB", integer=True)  # 64 TiB: the largest root volumes sold


class _Hardware(SpecModel):
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
    instance_type: Annotated[str, AfterValidator(check_instance_type)] | None = Field(
        default=None, description="one instance type, e.g. g5.xlarge"
    )
    cpus: Annotated[float, BeforeValidator(at_least), VCPUS.annotated("cpus")] | None = None
    memory_gib: (
        Annotated[float, BeforeValidator(at_least), MEMORY_GIB.annotated("memory_gib")] | None
    ) = None

    @model_validator(mode="before")
    @classmethod
    def _skypilot_memory(cls, data: Any) -> Any:
        # SkyPilot's ``memory`` (GiB, ``8+`` = at least 8) is spothop's ``memory_gib``, as its
        # ``accelerators`` and ``cpus`` are spothop's own: a spelling, not another dialect.
        if isinstance(data, Mapping) and "memory" in data:
            if "memory_gib" in data:
                raise ValueError("'memory' and 'memory_gib' say the same; keep one")
            data = {("memory_gib" if k == "memory" else k): v for k, v in data.items()}
        return data

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
            "instance_type": self.instance_type,
        }


class AlternativeSpec(_Hardware):
    """One entry of ``resources.any_of``: hardware (and optionally places) the job may run on instead.

    Fields it leaves out are inherited from ``resources``; ``providers``, ``regions``
    and ``zones`` narrow the job's own for this alternative; ``market`` keeps it to one market
    (the job's ``market`` must allow it: ``auto``).
    """

    providers: list[Name] | None = None
    regions: list[Place] | None = None
    zones: list[Place] | None = None
    # Only this market for this alternative (SkyPilot's use_spot in an entry): "spot", or
    # "on-demand" (reserved capacity serves it too). None: the job's market.
    market: Literal["spot", "on-demand"] | None = None


class ResourcesSpec(_Hardware):
    """What each node needs. ``any_of``: alternatives, any one of which will do.

    A set of GPUs in ``accelerators`` (:func:`~spothop.jobs.spec_values.accelerator_choices`:
    ``[L4:1, A10G:1]``, ``{L4: 1, A10G: 1}``) is alternatives, as in SkyPilot: one ``any_of``
    entry per GPU, or, beside ``any_of``, each entry that names no GPU once per GPU of the set
    (an entry's own set likewise); entries that come out the same are kept once.
    """

    any_of: list[AlternativeSpec] = Field(default_factory=list)
    # Alternatives in preference order (SkyPilot's ``ordered``): the first one that can be had
    # is used, even where a later one is cheaper. Exclusive with any_of.
    ordered: list[AlternativeSpec] = Field(default_factory=list)
    # The node's root volume, as SkyPilot's disk_size and disk_tier say: recorded with the job
    # (the local cloud keeps it; the cloud adapters will size the root volume from it).
    disk_size_gib: Annotated[int, DISK_SIZE_GIB.annotated("disk_size_gib")] | None = None
    disk_tier: DiskTier | None = None
    # The cloud's own machine image to boot (SkyPilot's image_id that is not docker:): one id,
    # or one per region ({us-east-1: ami-…}); it belongs to one cloud (JobSpec checks).
    image_id: Annotated[str | dict[Place, str], BeforeValidator(machine_image)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _accelerator_sets(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        if data.get("any_of") and data.get("ordered"):
            raise ValueError(
                "'any_of' (any one, the cheapest useful) and 'ordered' (a preference order) "
                "both list alternatives; keep one"
            )
        return expand_accelerator_sets(data, "ordered" if data.get("ordered") else "any_of")

    @property
    def disk(self) -> DiskSpec | None:
        """The root volume asked for (:class:`~spothop.providers.base.DiskSpec`), or None."""
        if self.disk_size_gib is None and self.disk_tier is None:
            return None
        return DiskSpec(self.disk_size_gib, self.disk_tier)

    def image_id_in(self, region: str) -> str | None:
        """The machine image to boot in ``region``: the one id, that region's, or None."""
        if isinstance(self.image_id, dict):
            return self.image_id.get(region)
        return self.image_id

    @property
    def alternatives(self) -> list[AlternativeSpec]:
        """The alternatives, whichever list gives them (``any_of`` or ``ordered``)."""
        return self.ordered or self.any_of


def expand_accelerator_sets(data: Mapping[Any, Any], key: str = "any_of") -> dict[Any, Any]:
    """``resources`` with its GPU sets made ``key`` (``any_of`` or ``ordered``) entries, in the
    order written (see :class:`ResourcesSpec`)."""
    out = dict(data)
    top = accelerator_choices(out.get("accelerators"))
    entries = out.get(key)
    if top is None and not isinstance(entries, list):
        return out
    if top is not None:
        del out["accelerators"]
    if not isinstance(entries, list) or not entries:
        if top is not None:
            out[key] = [{"accelerators": choice} for choice in top]
        return out
    expanded: list[Any] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            expanded.append(entry)  # the entry's own check refuses it
            continue
        own = accelerator_choices(entry.get("accelerators"))
        choices = own if own is not None else top if "accelerators" not in entry else None
        if choices is None:
            expanded.append(entry)
            continue
        expanded += [{**entry, "accelerators": choice} for choice in choices]
    unique: list[Any] = []
    for entry in expanded:
        if entry not in unique:
            unique.append(entry)
    out[key] = unique
    return out
