"""What a job needs from an instance, as the scheduler reads it: :class:`Requirements`.

A :class:`Requirements` is the spec's ``resources``, ``providers``,
``regions`` and ``zones`` reduced to filters over offerings. The job spec
builds it (``JobSpec.requirements()``); nothing here parses YAML.

Contract:

- Every field is a filter; its default imposes nothing. An offering
  *qualifies* when it passes every filter of the outer requirements **and**,
  when ``alternatives`` is not empty, every filter of at least one
  alternative (the spec's ``any_of``: the outer fields are what every choice
  shares, each alternative one acceptable shape).
- ``gpu`` is a canonical GPU name (``A100-SXM4-80GB``) or a family name
  (``A100``: every variant), resolved through :mod:`spothop.resources.gpus`;
  an unknown name raises :class:`~spothop.errors.UnknownGpuError` (with
  suggestions) when the requirements are made, not when they are used.
- ``gpus_per_node`` is exact: a job written for one GPU does not get eight
  (the score counts every GPU's TFLOPS as useful, so idle GPUs would look
  like a bargain). ``None`` means one, except on requirements with
  ``alternatives``, where each alternative says its own (:attr:`node_gpus`).
  ``min_*`` are lower bounds, per GPU where the name says so;
  ``min_tflops_per_gpu`` is the catalog's *nominal* dense figure (what a
  user looks up on a datasheet), not the measured or derated one.
- ``interconnect`` is the least link the GPUs of one instance need, ordered
  none < pcie < nvlink/xgmi < nvswitch (:data:`INTERCONNECT_RANK`).
- ``instance_type`` names one instance type (``g5.xlarge``): only offerings of that
  type qualify, on whichever providers sell it; with it and no GPU count, the
  type's own GPU count is taken (:attr:`node_gpus` is None).
- ``ordered``: the ``alternatives`` are in preference order (SkyPilot's
  ``ordered``), not "any one, cheapest first": :meth:`preference` gives an
  offering's rank (the first alternative it meets), and placement puts every
  candidate of an earlier alternative before any of a later one.
- ``providers_allow`` empty allows every provider; ``providers_deny`` wins
  over ``providers_allow``. ``regions`` and ``zones`` empty allow every place.
- ``checkpoint_gpu`` is the GPU the job's committed checkpoint was made on
  (``None``: no checkpoint yet, or not made on a GPU); with it, an offering
  qualifies only if the hardware compatibility matrix
  (:mod:`spothop.resources.compat`) lets the checkpoint move to its GPU under
  ``compat_need``; :meth:`Requirements.refusals` gives the matrix's reason
  for each GPU it refuses. :meth:`Requirements.moving_from` adds both.
- :data:`FILTERS` names each filter as :meth:`Requirements.failed` reports it
  and as a ranking's ``excluded`` counts it, so a spec no offering satisfies
  can say which requirement excluded the most offerings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spothop.errors import ConfigError
from spothop.resources.compat import CompatNeed, compat_matrix
from spothop.resources.gpus import gpu_catalog, match_gpus
from spothop.resources.offering import Interconnect, Offering

INTERCONNECT_RANK: Mapping[Interconnect, int] = {
    Interconnect.NONE: 0,
    Interconnect.PCIE: 1,
    Interconnect.NVLINK: 2,
    Interconnect.XGMI: 2,  # AMD's Infinity Fabric plays NVLink's part
    Interconnect.NVSWITCH: 3,
}

# The filters in the order they are checked and reported; each is a spec field's name.
FILTERS: tuple[str, ...] = (
    "providers",
    "regions",
    "zones",
    "instance_type",
    "gpu",
    "gpus_per_node",
    "min_gpu_memory_gib",
    "min_tflops_per_gpu",
    "interconnect",
    "min_cpus",
    "min_memory_gib",
    "compatible",
    "any_of",
)


@dataclass(frozen=True)
class Requirements:
    """Filters over offerings (see the module docstring for the contract)."""

    gpu: str | None = None
    gpus_per_node: int | None = None
    min_gpu_memory_gib: float | None = None
    min_tflops_per_gpu: float | None = None
    interconnect: Interconnect | None = None
    min_cpus: float | None = None
    min_memory_gib: float | None = None
    providers_allow: tuple[str, ...] = ()
    providers_deny: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    zones: tuple[str, ...] = ()
    alternatives: tuple[Requirements, ...] = ()
    ordered: bool = False
    instance_type: str | None = None
    # On an alternative: only this market ("spot", or "on-demand", which reserved capacity also
    # serves): SkyPilot's use_spot in an any_of/ordered entry. None: any market the job asks for.
    market: str | None = None
    checkpoint_gpu: str | None = None
    compat_need: CompatNeed | None = None
    gpu_names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise ConfigError(f"gpus_per_node must be at least 1, got {self.gpus_per_node}")
        for name in ("min_gpu_memory_gib", "min_tflops_per_gpu", "min_cpus", "min_memory_gib"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ConfigError(f"{name} must be a non-negative number, got {value!r}")
        if self.interconnect is not None:
            object.__setattr__(self, "interconnect", Interconnect(self.interconnect))
        if self.market not in (None, "spot", "on-demand"):
            raise ConfigError(f"an alternative's market is spot or on-demand, got {self.market!r}")
        for name in ("providers_allow", "providers_deny", "regions", "zones", "alternatives"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        names = frozenset(m.name for m in match_gpus(self.gpu)) if self.gpu else frozenset()
        object.__setattr__(self, "gpu_names", names)
        if self.checkpoint_gpu is not None:
            canonical = gpu_catalog().resolve(self.checkpoint_gpu).name
            object.__setattr__(self, "checkpoint_gpu", canonical)
        if self.compat_need is not None:
            compat_matrix().check_need(self.compat_need)

    def moving_from(self, gpu: str | None, need: CompatNeed | None = None) -> Requirements:
        """These requirements for a job whose committed checkpoint was made on ``gpu``.

        ``None`` (no checkpoint, or one not made on a GPU) leaves them as they are."""
        if gpu is None:
            return self
        return replace(self, checkpoint_gpu=gpu, compat_need=need)

    def refusals(self, gpus: Iterable[str]) -> dict[str, str]:
        """gpu → the matrix's reason, for each of ``gpus`` the checkpoint may not move to.

        Empty without ``checkpoint_gpu``. A name the catalog does not know (an
        offering with no GPU) is refused too: the checkpoint was made on a GPU."""
        if self.checkpoint_gpu is None:
            return {}
        catalog, matrix = gpu_catalog(), compat_matrix()
        out: dict[str, str] = {}
        for name in gpus:
            model = catalog.lookup(name) if name else None
            if model is None:
                out[name] = (
                    f"{self.checkpoint_gpu} → {name or 'no GPU'}: not a GPU the matrix knows"
                )
                continue
            verdict = matrix.compatible(self.checkpoint_gpu, model, self.compat_need)
            if not verdict.ok:
                out[name] = verdict.reason
        return out

    # -- per offering -------------------------------------------------------

    def failed(self, offering: Offering) -> list[str]:
        """The filters (names from :data:`FILTERS`) that ``offering`` fails; empty: it qualifies.

        An offering failing every alternative reports ``any_of`` once.
        """
        failed = self._own_failures(offering)
        if self.alternatives and all(alt.failed(offering) for alt in self.alternatives):
            failed.append("any_of")
        return failed

    def qualifies(self, offering: Offering) -> bool:
        return not self.failed(offering)

    def _own_failures(self, o: Offering) -> list[str]:
        checks = (
            ("providers", self.allows_provider(o.provider)),
            ("regions", not self.regions or o.region in self.regions),
            ("zones", not self.zones or (o.zone is not None and o.zone in self.zones)),
            ("instance_type", self.instance_type in (None, o.instance_type)),
            ("gpu", not self.gpu_names or o.gpu in self.gpu_names),
            ("gpus_per_node", self.node_gpus is None or o.gpu_count == self.node_gpus),
            (
                "min_gpu_memory_gib",
                self.min_gpu_memory_gib is None or o.gpu_memory_gib >= self.min_gpu_memory_gib,
            ),
            (
                "min_tflops_per_gpu",
                self.min_tflops_per_gpu is None
                or o.nominal_tflops_per_gpu >= self.min_tflops_per_gpu,
            ),
            (
                "interconnect",
                self.interconnect is None
                or INTERCONNECT_RANK[o.interconnect] >= INTERCONNECT_RANK[self.interconnect],
            ),
            ("min_cpus", self.min_cpus is None or o.vcpus >= self.min_cpus),
            ("min_memory_gib", self.min_memory_gib is None or o.memory_gib >= self.min_memory_gib),
            ("compatible", not self.refusals((o.gpu,))),
        )
        return [name for name, ok in checks if not ok]

    @property
    def node_gpus(self) -> int | None:
        """The GPU count an offering must have: ``gpus_per_node``, else 1; None (any) with alternatives."""
        if self.gpus_per_node is not None:
            return self.gpus_per_node
        return None if self.alternatives or self.instance_type else 1

    def preference(self, offering: Offering) -> int:
        """The offering's rank under ``ordered`` alternatives: the index of the first one it
        meets (``len(alternatives)`` when none); 0 for every offering when not ordered."""
        if not self.ordered:
            return 0
        for i, alt in enumerate(self.alternatives):
            if alt.qualifies(offering):
                return i
        return len(self.alternatives)

    def allows_provider(self, provider: str) -> bool:
        if provider in self.providers_deny:
            return False
        return not self.providers_allow or provider in self.providers_allow

    # -- description --------------------------------------------------------

    def describe(self, name: str) -> str:
        """What filter ``name`` asks for, in the spec's words (for "excluded the most" messages)."""
        if name == "providers":
            parts = []
            if self.providers_allow:
                parts.append("allow " + ", ".join(self.providers_allow))
            if self.providers_deny:
                parts.append("deny " + ", ".join(self.providers_deny))
            return "providers: " + "; ".join(parts)
        if name in ("regions", "zones"):
            return f"{name}: " + ", ".join(getattr(self, name))
        if name == "any_of":
            word = "ordered" if self.ordered else "any_of"
            return f"{word} ({len(self.alternatives)} alternatives)"
        if name == "gpus_per_node":
            return f"gpus_per_node: {self.node_gpus}"
        if name == "compatible":
            return f"the compatibility matrix for a checkpoint made on {self.checkpoint_gpu}"
        value = getattr(self, name, None)
        return f"{name}: {getattr(value, 'value', value)}"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (filters left at their default are omitted)."""
        out: dict[str, Any] = {}
        for name in (
            "market",
            "instance_type",
            "gpu",
            "gpus_per_node",
            "min_gpu_memory_gib",
            "min_tflops_per_gpu",
            "interconnect",
            "min_cpus",
            "min_memory_gib",
        ):
            value = getattr(self, name)
            if value is not None:
                out[name] = getattr(value, "value", value)
        for name in ("providers_allow", "providers_deny", "regions", "zones"):
            if getattr(self, name):
                out[name] = list(getattr(self, name))
        if self.alternatives:
            out["alternatives"] = [alt.to_dict() for alt in self.alternatives]
            if self.ordered:
                out["ordered"] = True
        if self.checkpoint_gpu is not None:
            out["checkpoint_gpu"] = self.checkpoint_gpu
            if self.compat_need is not None:
                out["compat_need"] = self.compat_need.to_dict()
        return out
