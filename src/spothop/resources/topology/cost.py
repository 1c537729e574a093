"""What it costs two GPUs to talk, and which k of n GPUs a job should take.

The cost model
--------------
Each path kind gets an estimated achievable one-way bandwidth in GB/s; the
cost of a pair is the inverse of that bandwidth, normalised so the machine's
best pair costs 1.0 (a pair that costs 4.0 moves data four times slower). The
GPU itself (the diagonal) costs 0.

======  =====================  ====================================================
kind    GB/s (estimated)       why
======  =====================  ====================================================
NV#     # x 20                 NCCL ``SM80_NVLINK_BW``/``SM90_NVLINK_BW``, per link
PIX     12                     NCCL ``PCI_BW``: one PCIe switch, Gen3 x16 as NCCL counts it
PXB     10                     several switches: same lanes, more hops (estimate)
PHB     8                      through the CPU host bridge, where P2P is often slowed or off
NODE    8                      between host bridges of one NUMA node; ranked with PHB
SYS     6                      NCCL ``QPI_BW``: across the socket interconnect
======  =====================  ====================================================

NCCL's figures come from ``src/graph/topo.h``; PXB/PHB/NODE are spothop's
interpolation between them, chosen to keep NCCL's path preference (PIX over
PXB over PHB over SYS). A path the output did not report is costed as SYS: the
worst it could be. Where a GPU's per-link NVLink speed is known
(``GpuDevice.nvlink_gbps_per_link``) it replaces the 20 GB/s default.

These are ranks with magnitudes, not predictions: they say that 12 bonded
NVLinks beat 4, and that any NVLink beats PCIe, by about how much.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from spothop.errors import ConfigError
from spothop.resources.topology.model import Link, LinkKind, Topology, labels

NVLINK_GBPS_PER_LINK = 20.0  # NCCL src/graph/topo.h SM80_NVLINK_BW and SM90_NVLINK_BW
PCIE_PIX_GBPS = 12.0  # NCCL src/graph/topo.h PCI_BW ("PCI Gen3 x16")
PCIE_PXB_GBPS = 10.0  # estimate: between PCI_BW and the host-bridge tier
PCIE_HOST_BRIDGE_GBPS = 8.0  # estimate: between PXB and QPI_BW
SOCKET_INTERCONNECT_GBPS = 6.0  # NCCL src/graph/topo.h QPI_BW

ESTIMATED_GBPS: dict[LinkKind, float] = {
    LinkKind.PIX: PCIE_PIX_GBPS,
    LinkKind.PXB: PCIE_PXB_GBPS,
    LinkKind.PHB: PCIE_HOST_BRIDGE_GBPS,
    LinkKind.NODE: PCIE_HOST_BRIDGE_GBPS,
    LinkKind.SYS: SOCKET_INTERCONNECT_GBPS,
}

# C(16, 8) = 12,870 subsets at worst: exact search stays in milliseconds up to here.
EXACT_SEARCH_MAX_GPUS = 16
_TIE_TOLERANCE = 1e-9


def estimated_bandwidth_gbps(
    link: Link | None, nvlink_gbps_per_link: float = NVLINK_GBPS_PER_LINK
) -> float:
    """Estimated one-way GB/s over ``link``; an unknown link is taken as SYS."""
    if link is None:
        return SOCKET_INTERCONNECT_GBPS
    if link.kind is LinkKind.SELF:
        return math.inf
    if link.kind is LinkKind.NV:
        return link.nvlink_count * nvlink_gbps_per_link
    return ESTIMATED_GBPS[link.kind]


def bandwidth_matrix_gbps(topology: Topology) -> list[list[float]]:
    """Estimated GB/s between every pair of GPUs (``inf`` on the diagonal)."""
    n = topology.gpu_count
    return [[_pair_gbps(topology, i, j) for j in range(n)] for i in range(n)]


def _pair_gbps(topology: Topology, i: int, j: int) -> float:
    per_link = [g.nvlink_gbps_per_link for g in (topology.gpus[i], topology.gpus[j])]
    known = [x for x in per_link if x is not None]
    return estimated_bandwidth_gbps(
        topology.link(i, j), min(known) if known else NVLINK_GBPS_PER_LINK
    )


def cost_matrix(topology: Topology) -> list[list[float]]:
    """Pairwise communication cost: best pair = 1.0, others best_GBps / pair_GBps, diagonal 0."""
    bandwidth = bandwidth_matrix_gbps(topology)
    n = len(bandwidth)
    off_diagonal = [bandwidth[i][j] for i in range(n) for j in range(n) if i != j]
    best = max(off_diagonal, default=1.0)
    return [[0.0 if i == j else best / bandwidth[i][j] for j in range(n)] for i in range(n)]


def set_cost(costs: Sequence[Sequence[float]], chosen: Sequence[int]) -> float:
    """Total pairwise cost of a set of GPU positions."""
    return sum(costs[a][b] for a, b in combinations(chosen, 2))


def choose_gpus(topology: Topology, k: int) -> list[int]:
    """The ``k`` GPUs with the lowest total pairwise cost, as GPU indices, ascending.

    Exact (branch and bound) up to 16 GPUs; beyond that a greedy build from
    every seed GPU. Ties go to the lowest indices: of two equally cheap sets,
    the one that sorts first. Raises :class:`ConfigError` unless 1 <= k <= n.
    """
    n = topology.gpu_count
    if not 1 <= k <= n:
        raise ConfigError(f"cannot choose {k} GPUs from {n}: k must be between 1 and {n}")
    costs = cost_matrix(topology)
    positions = _exact(costs, k) if n <= EXACT_SEARCH_MAX_GPUS else _greedy(costs, k)
    return sorted(topology.gpus[p].index for p in positions)


def _exact(costs: list[list[float]], k: int) -> list[int]:
    """Depth-first over ascending index sets, pruned by a lower bound on the pairs still to add."""
    n = len(costs)
    cheapest = min((costs[i][j] for i in range(n) for j in range(n) if i != j), default=0.0)
    best: list[int] = list(range(k))
    best_cost = set_cost(costs, best)
    chosen: list[int] = []

    def visit(start: int, cost: float) -> None:
        nonlocal best, best_cost
        m = len(chosen)
        if m == k:
            if cost < best_cost - _TIE_TOLERANCE:
                best, best_cost = list(chosen), cost
            return
        pairs_left = k * (k - 1) // 2 - m * (m - 1) // 2
        # Equal bounds are pruned too: the set already found sorts first.
        if cost + pairs_left * cheapest >= best_cost - _TIE_TOLERANCE:
            return
        for candidate in range(start, n - (k - m) + 1):
            added = sum(costs[c][candidate] for c in chosen)
            chosen.append(candidate)
            visit(candidate + 1, cost + added)
            chosen.pop()

    visit(0, 0.0)
    return best


def _greedy(costs: list[list[float]], k: int) -> list[int]:
    """From each seed, add the GPU that adds least cost; keep the cheapest result."""
    n = len(costs)
    best: list[int] | None = None
    best_cost = math.inf
    for seed in range(n):
        chosen = _grow(costs, [seed], k)
        total = set_cost(costs, chosen)
        if total < best_cost - _TIE_TOLERANCE or (
            abs(total - best_cost) <= _TIE_TOLERANCE
            and best is not None
            and sorted(chosen) < sorted(best)
        ):
            best, best_cost = chosen, total
    assert best is not None  # n >= k >= 1, so at least one seed ran
    return best


def _grow(costs: list[list[float]], chosen: list[int], k: int) -> list[int]:
    while len(chosen) < k:
        rest = [c for c in range(len(costs)) if c not in chosen]
        added = {c: sum(costs[c][x] for x in chosen) for c in rest}
        chosen.append(min(rest, key=lambda c: (added[c], c)))
    return chosen


def topology_json(topology: Topology, chosen: list[int] | None = None) -> dict[str, Any]:
    """JSON-ready: links spelled as ``topo -m`` does (``NV12``), the communication cost matrix
    (None without links), and ``chosen`` GPU indices when given."""
    data = topology.model_dump(mode="json", exclude={"links", "gpu_nic_links"})
    data["links"] = labels(topology.links) if topology.links is not None else None
    data["gpu_nic_links"] = labels(topology.gpu_nic_links)
    data["cost_matrix"] = cost_matrix(topology) if topology.links is not None else None
    if chosen is not None:
        data["chosen"] = chosen
    return data
