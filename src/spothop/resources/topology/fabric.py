"""NVLinks the ``nvidia-smi -q`` log implies but does not list: GPUs joined to one NVSwitch fabric.

On HGX/DGX boards (A100, H100, H200, B200 SXM) every GPU's NVLinks run to the
NVSwitches, so every pair of GPUs talks at the GPU's full NVLink bandwidth;
``nvidia-smi topo -m`` on such a machine prints ``NV<links>`` in every cell
(``NV12`` on a DGX A100, ``NV18`` on a DGX H100). The ``-q``/``-a`` text and
``-q -x`` XML of current drivers list no NVLinks, but each GPU reports its
fabric state: ``Completed`` once the fabric manager has joined it to the
NVSwitch fabric. When *every* GPU of the machine says ``Completed``, the links
are the ones ``topo -m`` would print: ``NV<n>`` for every pair, with ``n`` the
GPU's NVLink count (its published NVLink bandwidth over the per-link bandwidth
of its NVLink generation). Anything less certain (one GPU not joined, a GPU
model spothop does not know) leaves the links unknown, with a note.
"""

from __future__ import annotations

from spothop.errors import SpothopError
from spothop.resources.topology.model import Link, LinkKind, Topology

FABRIC_JOINED = (
    "Completed"  # nvidia-smi's fabric state once the fabric manager has registered the GPU
)

# Bidirectional GB/s of one NVLink: NVLink 3 (Ampere) and 4 (Hopper) carry 50,
# NVLink 5 (Blackwell) 100 (NVIDIA NVLink product pages). A100: 600 / 50 = 12
# links, H100 SXM: 900 / 50 = 18, B200: 1800 / 100 = 18.
NVLINK_GBPS_PER_LINK = {"Ampere": 50.0, "Hopper": 50.0, "Blackwell": 100.0}


def with_fabric_links(topology: Topology) -> Topology:
    """``topology`` with NVSwitch links filled in where the fabric state proves them (see module doc)."""
    gpus = topology.gpus
    if topology.links is not None or len(gpus) < 2:
        return topology
    if any(g.fabric_state != FABRIC_JOINED for g in gpus):
        return topology
    counts = {_nvlinks(g.name, g.memory_total_mib) for g in gpus}
    if len(counts) != 1 or None in counts:
        note = (
            "every GPU joined the NVSwitch fabric, but their NVLink count is unknown "
            "(a GPU model spothop does not know, or mixed models); `nvidia-smi topo -m` gives the links"
        )
        return topology.model_copy(update={"notes": (*topology.notes, note)})
    count = counts.pop()
    assert count is not None
    nv = Link(kind=LinkKind.NV, nvlink_count=count)
    self_link = Link(kind=LinkKind.SELF)
    links = tuple(
        tuple(self_link if i == j else nv for j in range(len(gpus))) for i in range(len(gpus))
    )
    note = (
        f"links inferred: every GPU reports NVSwitch fabric state {FABRIC_JOINED!r}, so each pair has the "
        f"GPU's full NV{count} (as `nvidia-smi topo -m` prints on such a board)"
    )
    return topology.model_copy(update={"links": links, "notes": (*topology.notes, note)})


def _nvlinks(name: str | None, memory_mib: int | None) -> int | None:
    if name is None:
        return None
    from spothop.resources.gpus import resolve_gpu

    try:
        model = resolve_gpu(name, None if memory_mib is None else memory_mib / 1024)
    except SpothopError:
        return None
    per_link = NVLINK_GBPS_PER_LINK.get(model.architecture)
    if not model.nvlink_bandwidth_gbps or per_link is None:
        return None
    return round(model.nvlink_bandwidth_gbps / per_link)


__all__ = ["FABRIC_JOINED", "with_fabric_links"]
