"""One typed model for what every ``nvidia-smi`` output format says about a machine's GPUs.

Each parser (``topo_matrix``, ``smi_xml``, ``smi_text``, ``rocm_smi``) fills what its
format tells and leaves the rest ``None``: ``nvidia-smi topo -m`` knows the paths
between GPUs but not their names; ``nvidia-smi -q`` knows names, memory and PCIe
links but not the paths. A field that is ``None`` means "this output did not say",
never "zero".
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator


class LinkKind(StrEnum):
    """The connection between two devices, as ``nvidia-smi topo -m`` names it.

    Best first: NVLink, then one PCIe switch (PIX), several switches (PXB),
    the CPU's host bridge (PHB) or host bridges within one NUMA node (NODE),
    and last the socket interconnect between NUMA nodes (SYS). ``SELF`` is the
    matrix diagonal ("X").
    """

    SELF = "X"
    NV = "NV"
    PIX = "PIX"
    PXB = "PXB"
    PHB = "PHB"
    NODE = "NODE"
    SYS = "SYS"

    @property
    def rank(self) -> int:
        """Higher is a better (faster, fewer hops) path; PHB and NODE share a rank."""
        return _RANKS[self]


_RANKS = {
    LinkKind.SELF: 6,
    LinkKind.NV: 5,
    LinkKind.PIX: 4,
    LinkKind.PXB: 3,
    LinkKind.PHB: 2,
    LinkKind.NODE: 2,
    LinkKind.SYS: 1,
}


class Link(BaseModel):
    """One cell of the topology matrix: a kind, and for NVLink how many links are bonded.

    Links order by quality: ``Link(NV, 12) > Link(NV, 4) > Link(PIX) > Link(SYS)``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: LinkKind
    nvlink_count: int = Field(0, ge=0, description="bonded NVLinks; 0 unless kind is NV")

    @model_validator(mode="after")
    def _count_only_for_nvlink(self) -> Link:
        if self.kind is LinkKind.NV and self.nvlink_count < 1:
            raise ValueError("an NV link needs nvlink_count >= 1")
        if self.kind is not LinkKind.NV and self.nvlink_count:
            raise ValueError(f"a {self.kind.value} link has no NVLinks")
        return self

    @property
    def label(self) -> str:
        """The spelling ``nvidia-smi topo -m`` uses: ``NV12``, ``PIX``, ``X``."""
        return f"NV{self.nvlink_count}" if self.kind is LinkKind.NV else self.kind.value

    def _key(self) -> tuple[int, int]:
        return (self.kind.rank, self.nvlink_count)

    def __lt__(self, other: Link) -> bool:
        return self._key() < other._key()

    def __le__(self, other: Link) -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: Link) -> bool:
        return self._key() > other._key()

    def __ge__(self, other: Link) -> bool:
        return self._key() >= other._key()


SELF_LINK = Link(kind=LinkKind.SELF)


class GpuDevice(BaseModel):
    """One GPU as the output described it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, description="position in the output, as CUDA_VISIBLE_DEVICES counts")
    name: str | None = Field(
        None, description="product name as printed, e.g. 'NVIDIA H100 80GB HBM3'"
    )
    uuid: str | None = None
    pci_bus_id: str | None = Field(None, description="e.g. '00000000:18:00.0'")
    memory_total_mib: int | None = Field(None, ge=0)
    pcie_gen_current: int | None = None
    pcie_gen_max: int | None = None
    pcie_link_width_current: int | None = Field(None, description="lanes, e.g. 16")
    pcie_link_width_max: int | None = None
    nvlink_active_links: int | None = Field(
        None, description="active NVLinks when the output lists them"
    )
    nvlink_gbps_per_link: float | None = Field(None, description="per-link speed when listed, GB/s")
    fabric_state: str | None = Field(
        None, description="NVSwitch fabric state ('Completed' when joined)"
    )
    cpu_affinity: str | None = Field(None, description="CPU list, e.g. '0-55,112-167'")
    numa_affinity: str | None = Field(None, description="NUMA node(s) local to the GPU")

    @property
    def memory_total_gib(self) -> float | None:
        return None if self.memory_total_mib is None else self.memory_total_mib / 1024


class SourceFormat(StrEnum):
    TOPO_MATRIX = "nvidia-smi topo -m"
    SMI_XML = "nvidia-smi -q -x"
    SMI_QUERY_TEXT = "nvidia-smi -q"
    SMI_TABLE = "nvidia-smi"
    ROCM_SMI = "rocm-smi"


LinkMatrix = tuple[tuple[Link | None, ...], ...]


class Topology(BaseModel):
    """The GPUs of one machine and, where the output tells, the paths between them.

    ``links[i][j]`` is the path from GPU i to GPU j (``None``: not reported, as for
    rows missing from a truncated matrix); ``links`` itself is ``None`` for formats
    that carry no paths. ``nics`` and ``gpu_nic_links`` do the same for NICs.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_format: SourceFormat
    gpus: tuple[GpuDevice, ...]
    links: LinkMatrix | None = None
    nics: tuple[str, ...] = ()
    gpu_nic_links: LinkMatrix = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    legend: dict[str, str] = Field(
        default_factory=dict, description="the matrix legend, 'PIX' -> meaning"
    )
    notes: tuple[str, ...] = Field((), description="what was odd about the input (truncation, ...)")

    @model_validator(mode="after")
    def _square(self) -> Topology:
        n = len(self.gpus)
        indices = [gpu.index for gpu in self.gpus]
        if len(set(indices)) != n:  # choose_gpus answers in indices: two GPUs cannot share one
            repeated = sorted({i for i in indices if indices.count(i) > 1})
            raise ValueError(f"GPU index {', '.join(map(str, repeated))} appears more than once")
        if self.links is not None and (
            len(self.links) != n or any(len(r) != n for r in self.links)
        ):
            raise ValueError(f"links must be {n}x{n}")
        if self.gpu_nic_links and (
            len(self.gpu_nic_links) != n
            or any(len(r) != len(self.nics) for r in self.gpu_nic_links)
        ):
            raise ValueError(f"gpu_nic_links must be {n}x{len(self.nics)}")
        return self

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def link(self, i: int, j: int) -> Link | None:
        """The path between GPUs i and j, ``None`` when the output did not say."""
        if i == j:
            return SELF_LINK
        return None if self.links is None else self.links[i][j]

    def nvlink_count(self, i: int, j: int) -> int:
        """Bonded NVLinks between GPUs i and j; 0 when not NVLinked or not reported."""
        link = self.link(i, j)
        return link.nvlink_count if link is not None and i != j else 0

    def nvlink_counts(self) -> list[list[int]]:
        n = self.gpu_count
        return [[self.nvlink_count(i, j) for j in range(n)] for i in range(n)]


def labels(matrix: LinkMatrix) -> list[list[str | None]]:
    return [[None if cell is None else cell.label for cell in row] for row in matrix]
