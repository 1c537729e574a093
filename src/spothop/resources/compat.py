"""The hardware compatibility matrix: may a checkpoint made on one GPU be restored on another?

The matrix is data (``data/compat.yaml``): vendor stacks, each with its
architecture families oldest first. The per-GPU figures it judges by —
architecture, CUDA compute capability, memory per GPU — come from
``data/gpus.yaml`` through :mod:`spothop.resources.gpus`, their one source.

Contract of :meth:`CompatMatrix.compatible` (and the module's
:func:`compatible`): a checkpoint made on ``source`` may move to ``target``
under a job's :class:`CompatNeed` when every rule holds —

1. **vendor stack**: both architectures are in the same stack (CUDA, ROCm);
2. **architecture**: the target's family is the source's or newer, or, when
   the job declares ``min_architecture``, that minimum or newer;
3. **compute capability**: the target's is at least the job's
   ``min_compute_capability`` (a part with none — not CUDA — fails a need);
4. **memory**: the target's memory per GPU is at least ``state_memory_gib``,
   what one rank's state takes on its GPU.

The answer is a :class:`Verdict`: ``ok`` and one reason per broken rule, each
naming both GPUs and the figures compared ("H100-SXM5-80GB → V100-SXM2-16GB:
architecture Volta is older than the checkpoint's Hopper"), so a placement
that refuses an offering, ``spothop plan`` and ``spothop gpus
--compatible-with`` can say why. Pure: no I/O once the matrix is loaded.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources as importlib_resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from spothop.errors import ConfigError
from spothop.resources.gpus import GpuCatalog, GpuModel, gpu_catalog

MATRIX_FILE = "data/compat.yaml"
_CAPABILITY = re.compile(r"(\d{1,2})\.(\d{1,2})")


def parse_compute_capability(text: str) -> tuple[int, int]:
    """``"8.6"`` → ``(8, 6)``; a clear :class:`ConfigError` for anything else."""
    found = _CAPABILITY.fullmatch(str(text).strip())
    if found is None:
        raise ConfigError(
            f"compute capability {text!r} is not MAJOR.MINOR; write it as NVIDIA does, e.g. '8.0'"
        )
    return int(found.group(1)), int(found.group(2))


@dataclass(frozen=True)
class CompatNeed:
    """What a job's state asks of the GPU it is restored on (every field optional).

    ``min_architecture``: the oldest family the job accepts, replacing the
    checkpoint's own family as the bound (rule 2); ``min_compute_capability``
    as ``"MAJOR.MINOR"``; ``state_memory_gib``: GiB one rank's state occupies
    on its GPU.
    """

    min_architecture: str | None = None
    min_compute_capability: str | None = None
    state_memory_gib: float | None = None

    def __post_init__(self) -> None:
        if self.min_compute_capability is not None:
            parse_compute_capability(self.min_compute_capability)
        memory = self.state_memory_gib
        if memory is not None and not (math.isfinite(memory) and memory >= 0):
            raise ConfigError(
                f"state_memory_gib must be a non-negative number of GiB, got {memory!r}"
            )

    def at_least(self, state_memory_gib: float | None) -> CompatNeed:
        """This need with ``state_memory_gib`` raised to the given figure (a manifest's sizes)."""
        if state_memory_gib is None:
            return self
        mine = self.state_memory_gib
        wanted = state_memory_gib if mine is None else max(mine, state_memory_gib)
        return CompatNeed(self.min_architecture, self.min_compute_capability, wanted)

    def to_dict(self) -> dict[str, Any]:
        return {
            "min_architecture": self.min_architecture,
            "min_compute_capability": self.min_compute_capability,
            "state_memory_gib": self.state_memory_gib,
        }


@dataclass(frozen=True)
class Verdict:
    """Whether a checkpoint made on ``source`` may move to ``target``; ``reasons`` says why not."""

    source: str
    target: str
    ok: bool
    reasons: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok

    @property
    def reason(self) -> str:
        """Every reason in one line ("" when ok)."""
        return "; ".join(self.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "ok": self.ok,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class CompatTable:
    """The verdicts for one source GPU over many targets (what ``spothop gpus --compatible-with``
    shows): each target model with its verdict, in the order asked."""

    source: GpuModel
    need: CompatNeed
    rows: tuple[tuple[GpuModel, Verdict], ...]

    @property
    def accepted(self) -> int:
        return sum(1 for _, v in self.rows if v.ok)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.name,
            "need": self.need.to_dict(),
            "accepted": self.accepted,
            "targets": [
                {
                    **verdict.to_dict(),
                    "architecture": model.architecture,
                    "compute_capability": model.compute_capability,
                    "memory_gib": model.memory_gib,
                }
                for model, verdict in self.rows
            ],
        }


class VendorStack(BaseModel):
    """One software stack and its architecture families, oldest first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    vendor: str
    families: tuple[str, ...] = Field(min_length=1)


class CompatMatrix:
    """The matrix: vendor stacks over the GPU catalog (see the module docstring for the rules)."""

    def __init__(
        self,
        stacks: Iterable[VendorStack],
        family_aliases: Mapping[str, str] | None = None,
        gpus: GpuCatalog | None = None,
    ) -> None:
        self.stacks = tuple(stacks)
        self.gpus = gpus or gpu_catalog()
        self._place: dict[str, tuple[VendorStack, int]] = {}
        for stack in self.stacks:
            for index, family in enumerate(stack.families):
                key = _fold(family)
                if key in self._place:
                    raise ValueError(f"architecture {family!r} is listed twice in the matrix")
                self._place[key] = (stack, index)
        self._aliases = {_fold(k): v for k, v in (family_aliases or {}).items()}
        for alias, family in self._aliases.items():
            if _fold(family) not in self._place:
                raise ValueError(f"family alias {alias!r} names {family!r}, which no stack lists")

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(f for s in self.stacks for f in s.families)

    def place_of(self, architecture: str) -> tuple[VendorStack, int] | None:
        """The stack an architecture is in and its position there (0: oldest); None if unlisted."""
        key = _fold(architecture)
        return self._place.get(key) or self._place.get(_fold(self._aliases.get(key, "")))

    def check_need(self, need: CompatNeed) -> None:
        """Raise :class:`ConfigError` if ``need`` names an architecture the matrix does not know."""
        if need.min_architecture is not None and self.place_of(need.min_architecture) is None:
            raise ConfigError(
                f"min_architecture {need.min_architecture!r} is not an architecture family; "
                f"use one of {', '.join(self.families)}"
            )

    def compatible(
        self, source: str | GpuModel, target: str | GpuModel, need: CompatNeed | None = None
    ) -> Verdict:
        """The verdict for moving a checkpoint made on ``source`` to ``target`` (module contract).

        GPU names are resolved through the catalog (any alias; a family name
        means its default variant); an unknown one raises
        :class:`~spothop.errors.UnknownGpuError`.
        """
        need = need or CompatNeed()
        self.check_need(need)
        src, dst = self._model(source), self._model(target)
        head = f"{src.name} → {dst.name}: "
        reasons = [head + why for why in self._failures(src, dst, need)]
        return Verdict(src.name, dst.name, not reasons, tuple(reasons))

    def table(
        self,
        source: str | GpuModel,
        need: CompatNeed | None = None,
        targets: Iterable[GpuModel] | None = None,
    ) -> CompatTable:
        """One verdict per target (default: every GPU of the catalog), in the order given."""
        need = need or CompatNeed()
        models = list(targets) if targets is not None else list(self.gpus)
        rows = tuple((m, self.compatible(source, m, need)) for m in models)
        return CompatTable(self._model(source), need, rows)

    def _model(self, gpu: str | GpuModel) -> GpuModel:
        return gpu if isinstance(gpu, GpuModel) else self.gpus.resolve(gpu)

    def _failures(self, src: GpuModel, dst: GpuModel, need: CompatNeed) -> list[str]:
        out: list[str] = []
        src_place, dst_place = self.place_of(src.architecture), self.place_of(dst.architecture)
        for model, place in ((src, src_place), (dst, dst_place)):
            if place is None:
                out.append(
                    f"architecture {model.architecture} ({model.name}) is not in the compatibility "
                    f"matrix; add it to spothop/resources/{MATRIX_FILE}"
                )
        if src_place is not None and dst_place is not None:
            out.extend(self._family_failures(src, dst, src_place, dst_place, need))
        if need.min_compute_capability is not None:
            wanted = parse_compute_capability(need.min_compute_capability)
            if dst.compute_capability is None:
                out.append(
                    f"{dst.name} has no CUDA compute capability; the job needs "
                    f"{need.min_compute_capability}"
                )
            elif parse_compute_capability(dst.compute_capability) < wanted:
                out.append(
                    f"compute capability {dst.compute_capability} is below the job's need "
                    f"{need.min_compute_capability}"
                )
        if need.state_memory_gib is not None and dst.memory_gib < need.state_memory_gib:
            out.append(
                f"{dst.memory_gib:g} GiB per GPU is less than the {need.state_memory_gib:.1f} GiB "
                "of state per GPU"
            )
        return out

    def _family_failures(
        self,
        src: GpuModel,
        dst: GpuModel,
        src_place: tuple[VendorStack, int],
        dst_place: tuple[VendorStack, int],
        need: CompatNeed,
    ) -> list[str]:
        (src_stack, src_index), (dst_stack, dst_index) = src_place, dst_place
        if src_stack.name != dst_stack.name:
            return [
                f"vendor stack {dst_stack.name} ({dst_stack.vendor}) is not the checkpoint's "
                f"{src_stack.name} ({src_stack.vendor})"
            ]
        if need.min_architecture is not None:
            bound_stack, bound_index = self.place_of(need.min_architecture) or src_place
            bound = bound_stack.families[bound_index]
            if bound_stack.name != dst_stack.name:
                return [
                    f"the job's minimum architecture {bound} is a {bound_stack.name} family, "
                    f"not {dst_stack.name}"
                ]
            if dst_index < bound_index:
                return [f"architecture {dst.architecture} is older than the job's minimum {bound}"]
            return []
        if dst_index < src_index:
            return [
                f"architecture {dst.architecture} is older than the checkpoint's {src.architecture}"
            ]
        return []


def _fold(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def load_matrix(text: str, gpus: GpuCatalog | None = None) -> CompatMatrix:
    """A matrix from the YAML text of a ``compat.yaml``."""
    raw = yaml.safe_load(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("stacks"), list):
        raise ConfigError("a compatibility matrix needs a 'stacks' list (see compat.yaml)")
    stacks = [VendorStack.model_validate(entry) for entry in raw["stacks"]]
    return CompatMatrix(stacks, raw.get("family_aliases") or {}, gpus)


@cache
def compat_matrix() -> CompatMatrix:
    """The built-in matrix, loaded once from ``data/compat.yaml``."""
    text = importlib_resources.files("spothop.resources").joinpath(MATRIX_FILE).read_text("utf-8")
    return load_matrix(text)


def compatible(
    src_gpu: str | GpuModel, dst_gpu: str | GpuModel, need: CompatNeed | None = None
) -> Verdict:
    """Shorthand for ``compat_matrix().compatible(src_gpu, dst_gpu, need)``."""
    return compat_matrix().compatible(src_gpu, dst_gpu, need)
