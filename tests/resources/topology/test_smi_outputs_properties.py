"""Any text as nvidia-smi or rocm-smi output: a consistent Topology, or TopologyParseError naming the file."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given

from spothop.errors import TopologyParseError
from spothop.resources.topology import choose_gpus, cost_matrix, parse_file, topology_json
from tests.hostile_text import PROPERTY_SETTINGS, head, hostile, shared_sample, write_hostile

_TEXT = shared_sample("nvidia-smi", "thamada-text")
NVIDIA = [
    head((_TEXT / name).read_text(errors="replace"), 60)
    for name in ("H100SXMx8_smi.txt", "A100SXMx4_smi_-a.txt", "L4_smi_-a.txt")
]
XML = [
    head(shared_sample("nvidia-smi", "telegraf-xml", name).read_text(errors="replace"), 80)
    for name in ("a100-sxm4-v12.xml", "tesla-t4.xml")
]
TOPO = [
    (shared_sample("nvidia-smi", "topo") / name).read_text(errors="replace")
    for name in ("8x_rtx4090_pcie_topo.txt", "dgx_a100_40gb_topo_PARTIAL.txt")
]
ROCM = [
    head((_TEXT / name).read_text(errors="replace"), 60)
    for name in ("MI300X_smi.txt", "MI300X_x4_smi_-a.txt")
]


def _parse(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    path = write_hostile(tmp_path_factory.mktemp("smi") / "output.txt", text)
    try:
        topology = parse_file(path)
    except TopologyParseError as exc:
        assert str(exc).startswith(f"{path}: "), exc
        return
    n = topology.gpu_count  # the model checked its own shape (links n x n, NICs n x m)
    assert n >= 1 and json.dumps(topology_json(topology))
    costs = cost_matrix(topology)  # what `topo parse --choose` computes from it
    assert len(costs) == n and all(math.isfinite(c) and c >= 0 for row in costs for c in row)
    assert len(set(choose_gpus(topology, min(2, n)))) == min(2, n)


@PROPERTY_SETTINGS
@given(hostile(NVIDIA))
def test_any_nvidia_smi_text_parses_or_names_the_file(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    _parse(tmp_path_factory, text)


@PROPERTY_SETTINGS
@given(hostile(XML))
def test_any_nvidia_smi_xml_parses_or_names_the_file(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    _parse(tmp_path_factory, text)


@PROPERTY_SETTINGS
@given(hostile(TOPO))
def test_any_topo_matrix_parses_or_names_the_file(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    _parse(tmp_path_factory, text)


@PROPERTY_SETTINGS
@given(hostile(ROCM))
def test_any_rocm_smi_text_parses_or_names_the_file(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    _parse(tmp_path_factory, text)


def _doubled_device_row(text: str, marker: str) -> str:
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.lstrip("| ").startswith(marker))
    return "".join(lines[: at + 1] + lines[at:])


@pytest.mark.parametrize(("sample", "marker"), [(ROCM[0], "0 "), (NVIDIA[0], "0  NVIDIA")])
def test_a_device_row_printed_twice_is_refused_not_read_as_two_gpus_with_one_index(
    tmp_path_factory: pytest.TempPathFactory, sample: str, marker: str
) -> None:
    path = write_hostile(
        tmp_path_factory.mktemp("smi") / "output.txt", _doubled_device_row(sample, marker)
    )
    with pytest.raises(TopologyParseError, match=str(path)):
        parse_file(path)
