"""GPU models: one canonical record per accelerator, and every cloud's spelling of it.

Clouds name the same GPU differently ("A10G", "NVIDIA A100-SXM4-80GB",
"nvidia-tesla-v100", "gpu_1x_a100_sxm4"). :func:`resolve_gpu` maps any of
those spellings to one :class:`GpuModel`; :func:`match_gpus` answers a user's
query, where a family name ("H100") stands for all its variants.

The figures are the vendors' published *dense* numbers (no 2:4 sparsity), in
TFLOPS; memory in GiB as marketed (the vendors' "80 GB" is kept as 80);
bandwidth in GB/s. They live in ``data/gpus.yaml``; each entry names its source.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from enum import StrEnum
from functools import cache
from importlib import resources as importlib_resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from spothop.errors import UnknownGpuError


class MemoryType(StrEnum):
    GDDR5 = "GDDR5"
    GDDR6 = "GDDR6"
    GDDR6X = "GDDR6X"
    GDDR7 = "GDDR7"
    HBM2 = "HBM2"
    HBM2E = "HBM2e"
    HBM3 = "HBM3"
    HBM3E = "HBM3e"


class GpuModel(BaseModel):
    """Published facts about one accelerator model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="canonical name, e.g. 'A100-SXM4-80GB'")
    family: str = Field(description="what a user types to mean every variant, e.g. 'A100'")
    vendor: str
    architecture: str
    compute_capability: str | None = Field(
        None, description="CUDA compute capability; None for non-NVIDIA"
    )
    memory_gib: float = Field(gt=0)
    memory_type: MemoryType
    memory_bandwidth_gbps: float = Field(gt=0, description="device memory bandwidth, GB/s")
    nvlink_bandwidth_gbps: float | None = Field(
        None,
        description="total GPU-to-GPU link bandwidth (NVLink, Infinity Fabric), GB/s; None if the part has none",
    )
    form_factor: str = Field(description="SXM, PCIe, OAM, ...")
    fp32_tflops: float = Field(gt=0, description="non-tensor FP32")
    tf32_tflops: float | None = Field(None, description="dense TF32 tensor")
    fp16_tflops: float | None = Field(
        None, description="dense FP16 tensor (or packed FP16 without tensor cores)"
    )
    bf16_tflops: float | None = Field(None, description="dense BF16 tensor")
    fp8_tflops: float | None = Field(None, description="dense FP8 tensor")
    aliases: tuple[str, ...] = ()
    source: str = Field(description="where the figures come from")

    @model_validator(mode="after")
    def _ordered_precisions(self) -> GpuModel:
        # Lower precision is never slower on the same part; a violation is a typo.
        chain = [self.fp32_tflops, self.tf32_tflops, self.bf16_tflops, self.fp8_tflops]
        known = [x for x in chain if x is not None]
        if known != sorted(known):
            raise ValueError(
                f"{self.name}: TFLOPS must not fall from FP32 to TF32 to BF16 to FP8: {chain}"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """Every published figure, JSON-ready, with :attr:`nominal_tflops`."""
        data: dict[str, Any] = self.model_dump(mode="json")
        data["nominal_tflops"] = self.nominal_tflops
        return data

    @property
    def nominal_tflops(self) -> float:
        """The figure compute-per-dollar is judged by: dense BF16, else FP16, else FP32.

        BF16 is what LLM training and inference run in; parts without it
        (V100, T4, P100) fall back to FP16 tensor, and K80 to FP32.
        """
        for value in (self.bf16_tflops, self.fp16_tflops, self.fp32_tflops):
            if value is not None:
                return value
        return self.fp32_tflops  # unreachable: fp32 is required


def normalise_gpu_name(name: str) -> str:
    """Fold a cloud's spelling to a comparison key.

    Drops case, vendor words ("nvidia", "tesla", "amd", "instinct", "geforce"),
    a Lambda-style ``gpu_8x_`` prefix, and every separator, so that
    "NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb" and "a100_sxm4_80gb" agree.
    """
    key = name.strip().lower()
    key = re.sub(r"^gpu_\d+x_", "", key)
    # Not \b: "_" is a word character, and "Tesla_V100" must lose its vendor word too.
    key = re.sub(
        r"(?<![a-z0-9])(nvidia|tesla|amd|instinct|geforce|radeon|quadro)(?![a-z0-9])", " ", key
    )
    return re.sub(r"[^a-z0-9]", "", key)


class GpuCatalog:
    """Every known GPU model, indexed by canonical name, alias and family."""

    def __init__(self, models: Iterable[GpuModel]) -> None:
        self.models: dict[str, GpuModel] = {}
        self._by_key: dict[str, GpuModel] = {}
        self._families: dict[str, list[GpuModel]] = {}
        for model in models:
            if model.name in self.models:
                raise ValueError(f"GPU {model.name!r} is declared twice")
            self.models[model.name] = model
            self._families.setdefault(normalise_gpu_name(model.family), []).append(model)
            for spelling in (model.name, *model.aliases):
                key = normalise_gpu_name(spelling)
                other = self._by_key.get(key)
                if other is not None and other is not model:
                    raise ValueError(f"alias {spelling!r} names both {other.name} and {model.name}")
                self._by_key[key] = model

    def __len__(self) -> int:
        return len(self.models)

    def __iter__(self) -> Iterator[GpuModel]:
        return iter(self.models.values())

    def resolve(self, name: str, memory_gib: float | None = None) -> GpuModel:
        """The one model ``name`` spells; ``memory_gib`` settles a family name.

        "A100" alone is ambiguous; "A100" with 80 GiB is the 80 GB variant
        (the SXM one, where both form factors share the memory size, as clouds
        that say just "A100" run SXM parts). Raises :class:`UnknownGpuError`
        with suggestions when nothing matches.
        """
        key = normalise_gpu_name(name)
        exact = self._by_key.get(key)
        if exact is not None and (memory_gib is None or _memory_matches(exact, memory_gib)):
            return exact
        family = self._families.get(key)
        if family is None and exact is not None:
            family = self._families.get(normalise_gpu_name(exact.family))
        if family:
            candidates = family
            if memory_gib is not None:
                candidates = [m for m in family if _memory_matches(m, memory_gib)] or family
            if exact is not None and exact in candidates:
                return exact
            if len(candidates) == 1:
                return candidates[0]
            # Prefer the SXM part: clouds that say only "A100" or "H100" rent SXM boards.
            sxm = [m for m in candidates if m.form_factor == "SXM"]
            return (sxm or candidates)[0]
        raise UnknownGpuError(name, self.suggest(name))

    def lookup(self, spelling: str) -> GpuModel | None:
        """The model with exactly this name or alias (after folding), else None; no family guess."""
        return self._by_key.get(normalise_gpu_name(spelling))

    def match(self, query: str) -> list[GpuModel]:
        """Every model a user's ``--gpu`` query means: a family gives all its variants."""
        key = normalise_gpu_name(query)
        family = self._families.get(key)
        if family:
            return list(family)
        exact = self._by_key.get(key)
        if exact is not None:
            return [exact]
        raise UnknownGpuError(query, self.suggest(query))

    def suggest(self, name: str, limit: int = 3) -> list[str]:
        spellings: dict[str, str] = {}
        for model in self.models.values():
            for spelling in (model.name, model.family, *model.aliases):
                spellings.setdefault(
                    normalise_gpu_name(spelling),
                    model.name if spelling != model.family else model.family,
                )
        close = difflib.get_close_matches(
            normalise_gpu_name(name), list(spellings), n=limit * 3, cutoff=0.5
        )
        out: list[str] = []
        for key in close:
            if spellings[key] not in out:
                out.append(spellings[key])
        return out[:limit]


def _memory_matches(model: GpuModel, memory_gib: float) -> bool:
    # Clouds report usable memory (an "80 GB" A100 shows 79.6 GiB, 81,559 MiB on
    # an H100), so compare with a tolerance rather than exactly.
    return abs(model.memory_gib - memory_gib) <= 0.1 * model.memory_gib


# The catalog is our own 25 kB file, read by every process that resolves a GPU (each local
# instance's host among them): libyaml's safe loader, where PyYAML has it (its wheels do), reads
# it in about 8 ms against the pure-Python loader's 45 ms (idle machine).
_DATA_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@cache
def gpu_catalog() -> GpuCatalog:
    """The built-in GPU models, loaded once from ``data/gpus.yaml``."""
    text = (
        importlib_resources.files("spothop.resources")
        .joinpath("data/gpus.yaml")
        .read_text(encoding="utf-8")
    )
    raw = yaml.load(text, Loader=_DATA_LOADER)
    return GpuCatalog(GpuModel.model_validate(entry) for entry in raw["gpus"])


def resolve_gpu(name: str, memory_gib: float | None = None) -> GpuModel:
    """Shorthand for ``gpu_catalog().resolve(name, memory_gib)``."""
    return gpu_catalog().resolve(name, memory_gib)


def match_gpus(query: str) -> list[GpuModel]:
    """Shorthand for ``gpu_catalog().match(query)``."""
    return gpu_catalog().match(query)
