"""Every shared nvidia-smi sample: parsed, or refused as a named unsupported format.

New files dropped into the shared folder are picked up by the parametrisation.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import TopologyParseError
from spothop.resources.topology import SourceFormat, choose_gpus, cost_matrix, parse_file
from tests.resources.topology.conftest import DATA, data_file, sample_files

# Files that are not topology sources; the error must say what they are.
UNSUPPORTED_MARKERS = {"_deviceQuery.txt": "deviceQuery output", "_rocminfo.txt": "rocminfo output"}

# file -> (format, GPU count, first GPU's product name, its memory in MiB or None)
EXPECTED = {
    "telegraf-xml/a100-sxm4-v12.xml": (SourceFormat.SMI_XML, 1, "NVIDIA A100-SXM4-80GB", 81920),
    "telegraf-xml/a10g.xml": (SourceFormat.SMI_XML, 1, "NVIDIA A10G", 23028),
    "telegraf-xml/gtx-1070-ti.xml": (SourceFormat.SMI_XML, 1, "GeForce GTX 1070 Ti", 4096),
    "telegraf-xml/gtx-1660-ti.xml": (SourceFormat.SMI_XML, 1, "Graphics Device", 5912),
    "telegraf-xml/quadro-p2000-v12.xml": (SourceFormat.SMI_XML, 1, "Quadro P2000", 5120),
    "telegraf-xml/quadro-p400.xml": (SourceFormat.SMI_XML, 1, "Quadro P400", 1998),
    "telegraf-xml/rtx-3060-v12.xml": (SourceFormat.SMI_XML, 1, "NVIDIA GeForce RTX 3060", 12288),
    "telegraf-xml/rtx-3080-v12.xml": (SourceFormat.SMI_XML, 1, "NVIDIA GeForce RTX 3080", 10240),
    "telegraf-xml/rtx-3080-v13.xml": (SourceFormat.SMI_XML, 1, "NVIDIA GeForce RTX 3080", 10240),
    "telegraf-xml/rtx-3090-v12.xml": (SourceFormat.SMI_XML, 1, "NVIDIA GeForce RTX 3090", 24576),
    "telegraf-xml/rtx-4000-sff-ada-v13.xml": (
        SourceFormat.SMI_XML,
        1,
        "NVIDIA RTX 4000 SFF Ada Generation",
        20475,
    ),
    "telegraf-xml/tesla-t4.xml": (SourceFormat.SMI_XML, 1, "Tesla T4", 15360),
    "thamada-text/A100SXMx4_smi.txt": (SourceFormat.SMI_TABLE, 4, "NVIDIA A100-SXM4-80GB", 81920),
    "thamada-text/A100SXMx4_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        4,
        "NVIDIA A100-SXM4-80GB",
        81920,
    ),
    "thamada-text/A40x10_smi.txt": (SourceFormat.SMI_TABLE, 10, "NVIDIA A40", 46068),
    "thamada-text/A40x10_smi_-a.txt": (SourceFormat.SMI_QUERY_TEXT, 10, "NVIDIA A40", 46068),
    "thamada-text/H100NVLx2_smi.txt": (SourceFormat.SMI_TABLE, 2, "NVIDIA H100 NVL", 95830),
    "thamada-text/H100NVLx2_smi_-a.txt": (SourceFormat.SMI_QUERY_TEXT, 2, "NVIDIA H100 NVL", 95830),
    "thamada-text/H100SXMx8_smi.txt": (SourceFormat.SMI_TABLE, 8, "NVIDIA H100 80GB HBM3", 81559),
    "thamada-text/H100SXMx8_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        8,
        "NVIDIA H100 80GB HBM3",
        81559,
    ),
    "thamada-text/L40S_smi.txt": (SourceFormat.SMI_TABLE, 1, "NVIDIA L40S", 46068),
    "thamada-text/L40S_smi_-a.txt": (SourceFormat.SMI_QUERY_TEXT, 1, "NVIDIA L40S", 46068),
    "thamada-text/L4_smi.txt": (SourceFormat.SMI_TABLE, 1, "NVIDIA L4", 23034),
    "thamada-text/L4_smi_-a.txt": (SourceFormat.SMI_QUERY_TEXT, 1, "NVIDIA L4", 23034),
    "thamada-text/MI300X_smi.txt": (SourceFormat.ROCM_SMI, 1, "AMD Instinct MI300X", None),
    "thamada-text/MI300X_x4_smi.txt": (SourceFormat.ROCM_SMI, 4, "AMD Instinct MI300X", None),
    "thamada-text/MI300X_x4_smi_-a.txt": (
        SourceFormat.ROCM_SMI,
        4,
        "AMD Instinct MI300X OAM",
        None,
    ),
    "thamada-text/RTX2000Ada_smi.txt": (
        SourceFormat.SMI_TABLE,
        1,
        "NVIDIA RTX 2000 Ada Gene...",
        16380,
    ),
    "thamada-text/RTX2000Ada_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        1,
        "NVIDIA RTX 2000 Ada Generation",
        16380,
    ),
    "thamada-text/RTX3090_smi.txt": (SourceFormat.SMI_TABLE, 2, "NVIDIA GeForce RTX 3090", 24576),
    "thamada-text/RTX3090_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        2,
        "NVIDIA GeForce RTX 3090",
        24576,
    ),
    "thamada-text/RTX4000Ada_smi.txt": (
        SourceFormat.SMI_TABLE,
        1,
        "NVIDIA RTX 4000 Ada Gene...",
        20475,
    ),
    "thamada-text/RTX4000Ada_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        1,
        "NVIDIA RTX 4000 Ada Generation",
        20475,
    ),
    "thamada-text/RTX4060Ti_smi.txt": (
        SourceFormat.SMI_TABLE,
        2,
        "NVIDIA GeForce RTX 4060 Ti",
        16380,
    ),
    "thamada-text/RTX4060Ti_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        2,
        "NVIDIA GeForce RTX 4060 Ti",
        16380,
    ),
    "thamada-text/RTX4090_smi.txt": (SourceFormat.SMI_TABLE, 8, "NVIDIA GeForce RTX 4090", 24564),
    "thamada-text/RTX4090_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        8,
        "NVIDIA GeForce RTX 4090",
        24564,
    ),
    "thamada-text/RTX6000Ada_x8_smi.txt": (
        SourceFormat.SMI_TABLE,
        8,
        "NVIDIA RTX 6000 Ada Gene...",
        49140,
    ),
    "thamada-text/RTX6000Ada_x8_smi_-a.txt": (
        SourceFormat.SMI_QUERY_TEXT,
        8,
        "NVIDIA RTX 6000 Ada Generation",
        49140,
    ),
    "topo/8x_rtx4090_pcie_topo.txt": (SourceFormat.TOPO_MATRIX, 8, None, None),
    "topo/dgx_a100_40gb_topo_PARTIAL.txt": (SourceFormat.TOPO_MATRIX, 8, None, None),
}


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def _unsupported(path: Path) -> str | None:
    return next(
        (what for suffix, what in UNSUPPORTED_MARKERS.items() if path.name.endswith(suffix)), None
    )


@pytest.mark.parametrize("path", sample_files(), ids=_id)
def test_every_sample_parses_or_is_named_unsupported(path: Path) -> None:
    what = _unsupported(path)
    if what is not None:
        with pytest.raises(TopologyParseError, match=f"unsupported format: this is .*{what}"):
            parse_file(path)
        return
    topology = parse_file(path)
    assert topology.gpu_count >= 1
    assert [g.index for g in topology.gpus] == list(range(topology.gpu_count))
    # Every parsed machine can be costed and placed on.
    costs = cost_matrix(topology)
    assert all(costs[i][i] == 0.0 for i in range(topology.gpu_count))
    assert choose_gpus(topology, topology.gpu_count) == list(range(topology.gpu_count))


@pytest.mark.parametrize("path", sample_files(), ids=_id)
def test_every_sample_has_expectations(path: Path) -> None:
    """A new sample must be added to EXPECTED (or be a known unsupported kind)."""
    assert _unsupported(path) is not None or _id(path) in EXPECTED, f"add {_id(path)} to EXPECTED"


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_sample_values(relative: str) -> None:
    source_format, count, name, memory_mib = EXPECTED[relative]
    topology = parse_file(data_file(relative))
    assert topology.source_format is source_format
    assert topology.gpu_count == count
    assert topology.gpus[0].name == name
    assert topology.gpus[0].memory_total_mib == memory_mib
    # One machine's GPUs are all alike in these samples.
    assert {g.name for g in topology.gpus} == {name}


def test_data_folder_is_where_the_tests_expect() -> None:
    if not DATA.is_dir():
        pytest.skip(f"shared data not present at {DATA}")
    assert len(sample_files()) >= 50
