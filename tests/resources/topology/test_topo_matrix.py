"""``nvidia-smi topo -m``: the shared 8x RTX 4090 and DGX A100 samples, variants and malformed input."""

from __future__ import annotations

import pytest

from spothop.errors import TopologyParseError
from spothop.resources.topology import Link, LinkKind, parse_any, parse_topo_matrix
from tests.resources.topology.conftest import read

RTX4090 = "topo/8x_rtx4090_pcie_topo.txt"
DGX = "topo/dgx_a100_40gb_topo_PARTIAL.txt"

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def test_rtx4090_gpus_reach_each_other_only_across_sockets() -> None:
    topo = parse_topo_matrix(read(RTX4090))
    assert topo.gpu_count == 8
    pairs = [(i, j) for i in range(8) for j in range(8) if i != j]
    assert {topo.link(i, j).kind for i, j in pairs} == {LinkKind.SYS}  # type: ignore[union-attr]
    assert topo.nvlink_counts() == [[0] * 8 for _ in range(8)]
    assert topo.notes == ()


def test_rtx4090_nics_and_affinity() -> None:
    topo = parse_topo_matrix(read(RTX4090))
    assert topo.nics == ("NIC0", "NIC1")
    # Only GPU6 sits under the NICs' host bridge.
    assert [row[0].label for row in topo.gpu_nic_links] == ["SYS"] * 6 + ["PHB", "SYS"]  # type: ignore[union-attr]
    assert [g.cpu_affinity for g in topo.gpus] == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    assert [g.numa_affinity for g in topo.gpus] == ["0"] * 4 + ["1"] * 4


def test_dgx_partial_rows_fill_from_the_transpose() -> None:
    topo = parse_topo_matrix(read(DGX))
    assert topo.gpu_count == 8  # the header names eight GPUs; rows exist for four
    assert topo.link(0, 7) == Link(kind=LinkKind.NV, nvlink_count=12)
    assert topo.link(7, 0) == Link(kind=LinkKind.NV, nvlink_count=12)  # from row GPU0
    assert topo.link(4, 5) is None  # neither row is there
    assert topo.nvlink_count(1, 2) == 12
    assert topo.gpus[2].cpu_affinity == "16-31,144-159"
    assert topo.gpus[2].numa_affinity == "1"
    assert topo.gpus[5].cpu_affinity is None
    assert len(topo.nics) == 12
    assert topo.gpu_nic_links[0][0].kind is LinkKind.PXB  # type: ignore[union-attr]
    assert any("GPU4, GPU5, GPU6, GPU7" in note for note in topo.notes)


def test_tabs_and_spaces_parse_alike() -> None:
    text = read(RTX4090)
    spaced = "\n".join(line.expandtabs(8) for line in text.splitlines())
    assert "\t" not in spaced
    assert parse_topo_matrix(spaced) == parse_topo_matrix(text)


def test_legend_and_nic_legend_are_read() -> None:
    topo = parse_topo_matrix(read(RTX4090) + LEGEND)
    assert topo.legend["PIX"] == "Connection traversing at most a single PCIe bridge"
    assert topo.legend["NV#"] == "Connection traversing a bonded set of # NVLinks"
    assert topo.legend["NIC1"] == "mlx5_1"
    assert topo.gpu_count == 8


def test_ansi_colour_codes_are_ignored() -> None:
    text = read(DGX).replace("NV12", "\x1b[32mNV12\x1b[0m")
    assert parse_any(text) == parse_topo_matrix(read(DGX))


def test_legacy_soc_means_sys() -> None:
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSOC\t0-7\nGPU1\tSOC\t X \t8-15\n"
    topo = parse_topo_matrix(text)
    assert topo.link(0, 1) == Link(kind=LinkKind.SYS)
    assert topo.gpus[1].cpu_affinity == "8-15"


def test_link_ordering() -> None:
    nv12, nv4 = Link(kind=LinkKind.NV, nvlink_count=12), Link(kind=LinkKind.NV, nvlink_count=4)
    pix, pxb, phb, node, sys_ = (
        Link(kind=k)
        for k in (LinkKind.PIX, LinkKind.PXB, LinkKind.PHB, LinkKind.NODE, LinkKind.SYS)
    )
    assert nv12 > nv4 > pix > pxb > phb > sys_
    assert node >= phb and phb >= node  # one tier
    assert sorted([sys_, nv4, pxb, pix, nv12]) == [sys_, pxb, pix, nv4, nv12]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"line 1: expected the `nvidia-smi topo -m` header"),
        (
            "\tGPU0\tGPU1\nGPU0\t X \tFOO\n",
            r"line 2: row GPU0, column GPU1: expected X, NV<count>, PIX.*got 'FOO'",
        ),
        ("\tGPU0\tGPU1\nGPU0\t X \n", r"line 2: row GPU0 has 1 cells, expected 2"),
        (
            "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU9\tSYS\t X \n",
            r"line 3: expected a row for one of GPU0, GPU1; got 'GPU9'",
        ),
        (
            "\tGPU0\tGPU1\nGPU0\tSYS\t X \n",
            r"line 2: row GPU0, column GPU0: expected X \(self\); got SYS",
        ),
        (
            "\tGPU0\tGPU1\nGPU0\t X \tSYS\t0-7\n",
            r"line 2: row GPU0 has 1 values after the device columns, expected at most 0",
        ),
        ("\tGPU0\tGPU1\n", r"line 2: expected at least one device row"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV\n", r"got 'NV'"),
        (
            "\tGPU0\tGPU1\nGPU0\t X \tSYS\nGPU0\t X \tSYS\n",
            r"line 3: second row for GPU0 \(first on line 2\)",
        ),
    ],
)
def test_malformed_matrix_names_the_line(text: str, message: str) -> None:
    with pytest.raises(TopologyParseError, match=message):
        parse_topo_matrix(text)
