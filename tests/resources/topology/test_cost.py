"""The cost model and choose_gpus: real samples, exact search against brute force, ties, k checks."""

from __future__ import annotations

import random
from itertools import combinations

import pytest

from spothop.errors import ConfigError
from spothop.resources.topology import (
    GpuDevice,
    Link,
    LinkKind,
    SourceFormat,
    Topology,
    bandwidth_matrix_gbps,
    choose_gpus,
    cost_matrix,
    estimated_bandwidth_gbps,
    parse_topo_matrix,
    set_cost,
)
from spothop.resources.topology.cost import EXACT_SEARCH_MAX_GPUS, NVLINK_GBPS_PER_LINK
from tests.resources.topology.conftest import read

KINDS = [LinkKind.PIX, LinkKind.PXB, LinkKind.PHB, LinkKind.NODE, LinkKind.SYS]


def _topology(cells: dict[tuple[int, int], Link], n: int, default: Link | None = None) -> Topology:
    links = [[Link(kind=LinkKind.SELF) if i == j else default for j in range(n)] for i in range(n)]
    for (i, j), link in cells.items():
        links[i][j] = links[j][i] = link
    return Topology(
        source_format=SourceFormat.TOPO_MATRIX,
        gpus=tuple(GpuDevice(index=i) for i in range(n)),
        links=tuple(tuple(row) for row in links),
    )


def _nv(count: int) -> Link:
    return Link(kind=LinkKind.NV, nvlink_count=count)


def _random_topology(n: int, seed: int) -> Topology:
    rng = random.Random(seed)
    options = [_nv(1), _nv(2), _nv(4), *(Link(kind=k) for k in KINDS)]
    return _topology({(i, j): rng.choice(options) for i, j in combinations(range(n), 2)}, n)


def test_bandwidth_follows_link_order() -> None:
    order = [_nv(2), _nv(1), *(Link(kind=k) for k in KINDS)]
    gbps = [estimated_bandwidth_gbps(link) for link in order]
    assert gbps == sorted(gbps, reverse=True)
    assert estimated_bandwidth_gbps(_nv(12)) == 12 * NVLINK_GBPS_PER_LINK
    assert estimated_bandwidth_gbps(None) == estimated_bandwidth_gbps(Link(kind=LinkKind.SYS))


def test_known_per_link_speed_replaces_the_default() -> None:
    topo = _topology({(0, 1): _nv(4)}, 2)
    fast = topo.model_copy(
        update={
            "gpus": tuple(g.model_copy(update={"nvlink_gbps_per_link": 50.0}) for g in topo.gpus)
        }
    )
    assert bandwidth_matrix_gbps(fast)[0][1] == 200.0
    assert bandwidth_matrix_gbps(topo)[0][1] == 4 * NVLINK_GBPS_PER_LINK


def test_cost_is_normalised_to_the_best_pair() -> None:
    costs = cost_matrix(
        _topology({(0, 1): _nv(2), (0, 2): Link(kind=LinkKind.SYS)}, 3, Link(kind=LinkKind.PIX))
    )
    assert costs[0][1] == 1.0
    assert costs[0][2] == pytest.approx(2 * NVLINK_GBPS_PER_LINK / 6.0)
    assert costs[1][2] == pytest.approx(2 * NVLINK_GBPS_PER_LINK / 12.0)
    assert [costs[i][i] for i in range(3)] == [0.0, 0.0, 0.0]


def test_dgx_a100_pairs_are_nvlinked() -> None:
    topo = parse_topo_matrix(read("topo/dgx_a100_40gb_topo_PARTIAL.txt"))
    for k in (2, 3, 4):
        chosen = choose_gpus(topo, k)
        assert all(topo.nvlink_count(a, b) == 12 for a, b in combinations(chosen, 2))
    # Unknown links among GPU4-7 are costed as SYS, so a job of 5 takes GPU0-3 plus one.
    assert choose_gpus(topo, 5) == [0, 1, 2, 3, 4]


def test_rtx4090_all_sys_ties_go_to_lowest_indices() -> None:
    topo = parse_topo_matrix(read("topo/8x_rtx4090_pcie_topo.txt"))
    assert choose_gpus(topo, 3) == [0, 1, 2]
    assert cost_matrix(topo)[3][6] == 1.0


def test_choose_prefers_the_nvlinked_pairs_over_low_indices() -> None:
    # Two NVLink bridges across a PCIe box: 0-2 and 1-3 are bridged, the rest is SYS.
    topo = _topology({(0, 2): _nv(4), (1, 3): _nv(4)}, 4, Link(kind=LinkKind.SYS))
    assert choose_gpus(topo, 2) == [0, 2]
    # Four GPUs of eight: the two bridged pairs that share a PCIe switch beat two apart.
    cells = {
        (0, 1): _nv(4),
        (2, 3): _nv(4),
        (4, 5): _nv(4),
        (6, 7): _nv(4),
        (4, 6): Link(kind=LinkKind.PIX),
        (4, 7): Link(kind=LinkKind.PIX),
        (5, 6): Link(kind=LinkKind.PIX),
        (5, 7): Link(kind=LinkKind.PIX),
    }
    assert choose_gpus(_topology(cells, 8, Link(kind=LinkKind.SYS)), 4) == [4, 5, 6, 7]


@pytest.mark.parametrize("seed", range(12))
def test_exact_search_matches_brute_force(seed: int) -> None:
    n = 6 + seed % 5
    topo = _random_topology(n, seed)
    costs = cost_matrix(topo)
    for k in range(1, n + 1):
        best = min(combinations(range(n), k), key=lambda s: (round(set_cost(costs, s), 9), s))
        assert choose_gpus(topo, k) == list(best)


def test_greedy_beyond_exact_limit_is_close_to_optimal() -> None:
    # 18 GPUs in three NVLink islands of six: the greedy search must stay inside one island.
    n = EXACT_SEARCH_MAX_GPUS + 2
    cells = {(i, j): _nv(6) for i, j in combinations(range(n), 2) if i // 6 == j // 6}
    topo = _topology(cells, n, Link(kind=LinkKind.SYS))
    assert choose_gpus(topo, 6) == [0, 1, 2, 3, 4, 5]
    assert choose_gpus(topo, 3) == [0, 1, 2]


def test_sixteen_gpus_exact_is_fast_enough() -> None:
    topo = _random_topology(16, 99)
    assert len(choose_gpus(topo, 8)) == 8


@pytest.mark.parametrize("k", [0, -1, 9])
def test_k_outside_one_to_n_is_refused(k: int) -> None:
    topo = parse_topo_matrix(read("topo/8x_rtx4090_pcie_topo.txt"))
    with pytest.raises(ConfigError, match=f"cannot choose {k} GPUs from 8"):
        choose_gpus(topo, k)
