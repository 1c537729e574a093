"""``nvidia-smi -q -x``, ``-q``/``-a``, the default table and ``rocm-smi``: real values and malformed input."""

from __future__ import annotations

import pytest

from spothop.errors import TopologyParseError
from spothop.resources.gpus import resolve_gpu
from spothop.resources.topology import (
    parse_any,
    parse_rocm_smi,
    parse_smi_query,
    parse_smi_table,
    parse_smi_xml,
)
from tests.resources.topology.conftest import read


def test_xml_a100_fields() -> None:
    topo = parse_smi_xml(read("telegraf-xml/a100-sxm4-v12.xml"))
    gpu = topo.gpus[0]
    assert (topo.driver_version, topo.cuda_version) == ("535.54.03", "12.2")
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.pci_bus_id == "00000000:01:00.0"
    # The GPU's own 80 GB, not one of its MIG slices' 19968 MiB.
    assert gpu.memory_total_mib == 81920
    assert (
        gpu.pcie_gen_current,
        gpu.pcie_gen_max,
        gpu.pcie_link_width_current,
        gpu.pcie_link_width_max,
    ) == (4, 4, 16, 16)
    assert topo.links is None
    assert topo.notes == ("attached_gpus says 4 but the log describes 1",)


def test_xml_t4_runs_at_half_width() -> None:
    gpu = parse_smi_xml(read("telegraf-xml/tesla-t4.xml")).gpus[0]
    assert (gpu.pcie_link_width_current, gpu.pcie_link_width_max) == (8, 16)


def test_xml_old_driver_leaves_unknowns_none() -> None:
    topo = parse_smi_xml(read("telegraf-xml/gtx-1070-ti.xml"))
    gpu = topo.gpus[0]
    assert topo.driver_version is None
    assert gpu.pcie_gen_max is None and gpu.pcie_gen_current == 1
    assert gpu.pci_bus_id == "00000000:01:00.0"  # from the <gpu id=...> attribute


def test_query_text_h100_sxm() -> None:
    topo = parse_smi_query(read("thamada-text/H100SXMx8_smi_-a.txt"))
    assert (topo.driver_version, topo.cuda_version) == ("565.57.01", "12.7")
    assert topo.gpu_count == 8
    assert [g.pci_bus_id for g in topo.gpus][:3] == [
        "00000000:18:00.0",
        "00000000:2A:00.0",
        "00000000:3A:00.0",
    ]
    assert topo.gpus[0].uuid == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
    assert {(g.pcie_gen_current, g.pcie_gen_max, g.pcie_link_width_current) for g in topo.gpus} == {
        (5, 5, 16)
    }
    # The sample lists no NVLinks; the NVSwitch fabric state says the GPUs joined it.
    assert {g.fabric_state for g in topo.gpus} == {"Completed"}
    assert {g.nvlink_active_links for g in topo.gpus} == {None}


def test_query_text_reads_nested_sections_by_path() -> None:
    # "Max : 4" under PCIe Generation and "Max : 8x" under Link Width must not be confused.
    gpu = parse_smi_query(read("thamada-text/RTX4060Ti_smi_-a.txt")).gpus[0]
    assert (
        gpu.pcie_gen_max,
        gpu.pcie_gen_current,
        gpu.pcie_link_width_max,
        gpu.pcie_link_width_current,
    ) == (4, 4, 8, 4)


def test_query_text_idle_gpu_reports_gen1() -> None:
    # Idle GPUs drop their link to Gen1 to save power: current < max is normal, not a fault.
    gpus = parse_smi_query(read("thamada-text/A40x10_smi_-a.txt")).gpus
    assert {(g.pcie_gen_current, g.pcie_gen_max) for g in gpus} == {(1, 4)}


def test_table_keeps_names_nvidia_smi_cut_and_says_so() -> None:
    topo = parse_smi_table(read("thamada-text/RTX6000Ada_x8_smi.txt"))
    assert topo.gpus[0].name == "NVIDIA RTX 6000 Ada Gene..."
    assert len(topo.notes) == 8 and "nvidia-smi -q" in topo.notes[0]
    assert (topo.driver_version, topo.cuda_version) == ("550.127.05", "12.4")


def test_table_and_query_agree() -> None:
    table = parse_smi_table(read("thamada-text/H100SXMx8_smi.txt"))
    query = parse_smi_query(read("thamada-text/H100SXMx8_smi_-a.txt"))
    assert [(g.name, g.pci_bus_id, g.memory_total_mib) for g in table.gpus] == [
        (g.name, g.pci_bus_id, g.memory_total_mib) for g in query.gpus
    ]


def test_rocm_concise_and_log() -> None:
    concise = parse_rocm_smi(read("thamada-text/MI300X_x4_smi.txt"))
    log = parse_rocm_smi(read("thamada-text/MI300X_x4_smi_-a.txt"))
    assert [g.name for g in concise.gpus] == ["AMD Instinct MI300X"] * 4
    assert log.driver_version == "6.7.0"
    assert log.gpus[0].pci_bus_id == "0000:26:00.0"


@pytest.mark.parametrize(
    "relative",
    ["thamada-text/H100SXMx8_smi_-a.txt", "telegraf-xml/a10g.xml", "thamada-text/L4_smi.txt"],
)
def test_product_names_resolve_to_catalog_models(relative: str) -> None:
    gpu = parse_any(read(relative)).gpus[0]
    assert gpu.name is not None
    # These three are in the GPU table: an unknown name here is a regression, not a skip.
    model = resolve_gpu(gpu.name, gpu.memory_total_gib)
    assert model.memory_gib == pytest.approx(gpu.memory_total_gib, rel=0.1)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_smi_xml, "<nvidia_smi_log><gpu>", r"line 1, column \d+: expected well-formed"),
        (
            parse_smi_xml,
            "<?xml version='1.0'?>\n<other/>",
            r"line 1: expected a <nvidia_smi_log> root element; got <other>",
        ),
        (parse_smi_xml, "<nvidia_smi_log></nvidia_smi_log>", r"expected at least one <gpu>"),
        (
            parse_smi_query,
            "==============NVSMI LOG==============\n\nDriver Version : 1\n",
            r"line 3: expected at least one 'GPU <bus id>' block",
        ),
        (
            parse_smi_query,
            "==NVSMI LOG==\nGPU 00000000:01:00.0\n    Product Brand : NVIDIA\n",
            r"line 3: the block for GPU 00000000:01:00.0 ends without a 'Product Name",
        ),
        (
            parse_smi_table,
            "| NVIDIA-SMI 550 | Bus-Id |\n|   0  NVIDIA L4   On  |   00000000:01:00.0 Off |\n",
            r"line 3: expected the memory 'used MiB / total MiB' line under GPU 0",
        ),
        (
            parse_rocm_smi,
            "== ROCm System Management Interface ==\n== Concise Info ==\n",
            r"expected GPU rows in `rocm-smi` output",
        ),
    ],
)
def test_malformed_input_names_the_line(parse, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(TopologyParseError, match=message):
        parse(text)


def test_unknown_text_is_refused_with_what_is_supported() -> None:
    with pytest.raises(
        TopologyParseError,
        match=r"line 1: expected output of `nvidia-smi topo -m`.*got 'hello world'",
    ):
        parse_any("hello world\n")
    with pytest.raises(TopologyParseError, match="the input is empty"):
        parse_any("   \n")
