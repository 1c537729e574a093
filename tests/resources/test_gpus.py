"""The built-in GPU models (``data/gpus.yaml``): names, aliases, and published figures.

The figures are cross-checked against three independent public data sets kept in
``../shared/data/gpu-specs`` (never copied into the project), and every GPU name
in SkyPilot's Lambda and Vast catalogs (``../shared/data/catalog/skypilot-v7``)
must resolve to the right model.
"""

from __future__ import annotations

import ast
import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from spothop.errors import UnknownGpuError
from spothop.resources import gpus as gpus_module
from spothop.resources.gpus import GpuModel, gpu_catalog, normalise_gpu_name

SHARED_DATA = (Path(__file__).parents[2] / ".." / "shared" / "data").resolve()
GPU_SPECS = SHARED_DATA / "gpu-specs"
SKYPILOT = SHARED_DATA / "catalog" / "skypilot-v7"
NVIDIA_SMI = SHARED_DATA / "nvidia-smi"

needs_specs = pytest.mark.skipif(
    not GPU_SPECS.is_dir(), reason=f"shared GPU spec data not present at {GPU_SPECS}"
)
needs_skypilot = pytest.mark.skipif(
    not SKYPILOT.is_dir(), reason=f"shared SkyPilot catalog not present at {SKYPILOT}"
)

TOLERANCE = 0.05  # ours must agree with a published figure within 5 %

# The canonical names other modules (cloud catalogs) refer to, with their families,
# in the order the YAML must keep (the first SXM entry of a family is its default).
REQUIRED: list[tuple[str, str]] = [
    ("K80", "K80"),
    ("P4", "P4"),
    ("P100", "P100"),
    ("V100-SXM2-16GB", "V100"),
    ("V100-SXM2-32GB", "V100"),
    ("V100-PCIE-16GB", "V100"),
    ("T4", "T4"),
    ("A10", "A10"),
    ("A10G", "A10G"),
    ("L4", "L4"),
    ("L40", "L40"),
    ("L40S", "L40S"),
    ("A40", "A40"),
    ("RTX-A6000", "A6000"),
    ("A100-SXM4-40GB", "A100"),
    ("A100-SXM4-80GB", "A100"),
    ("A100-PCIE-40GB", "A100"),
    ("A100-PCIE-80GB", "A100"),
    ("A800-SXM4-80GB", "A800"),
    ("A800-PCIE-80GB", "A800"),
    ("H100-SXM5-80GB", "H100"),
    ("H100-PCIE-80GB", "H100"),
    ("H100-NVL-94GB", "H100"),
    ("H800-SXM5-80GB", "H800"),
    ("H20", "H20"),
    ("H200-SXM-141GB", "H200"),
    ("H200-NVL-141GB", "H200"),
    ("GH200", "GH200"),
    ("B200", "B200"),
    ("RTX-3090", "RTX3090"),
    ("RTX-4090", "RTX4090"),
    ("RTX-6000-ADA", "RTX6000-Ada"),
    ("RTX-4000-SFF-ADA", "RTX4000-SFF-Ada"),
    ("MI300X", "MI300X"),
    ("MI250X", "MI250X"),
    ("MI210", "MI210"),
]


def _close(ours: float | None, theirs: float, what: str) -> None:
    assert ours is not None, f"{what}: we have no figure, the shared data says {theirs}"
    assert math.isclose(ours, theirs, rel_tol=TOLERANCE), (
        f"{what}: ours {ours} vs published {theirs}"
    )


def _model(name: str) -> GpuModel:
    return gpu_catalog().models[name]


# --- the catalog itself -------------------------------------------------------


def test_the_fast_loader_reads_the_catalog_as_the_pure_python_one_does() -> None:
    # gpu_catalog reads with libyaml's loader (start-up time); it must see the same data.
    text = (Path(gpus_module.__file__).parent / "data" / "gpus.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=gpus_module._DATA_LOADER) == yaml.safe_load(text)


def test_loads_at_least_25_models() -> None:
    assert len(gpu_catalog()) >= 25


def test_required_names_families_and_order() -> None:
    catalog = gpu_catalog()
    required_names = [name for name, _ in REQUIRED]
    in_yaml_order = [m.name for m in catalog if m.name in set(required_names)]
    assert in_yaml_order == required_names
    for name, family in REQUIRED:
        assert catalog.models[name].family == family, name


def test_every_required_family_present() -> None:
    families = {m.family for m in gpu_catalog()}
    assert {family for _, family in REQUIRED} <= families


def test_family_names_are_not_aliases_of_one_model() -> None:
    # A family key that is also some model's alias would make resolve("A100")
    # pick that model instead of choosing by memory and form factor.
    catalog = gpu_catalog()
    multi = {normalise_gpu_name(m.family) for m in catalog if len(catalog.match(m.family)) > 1}
    assert {"a100", "h100", "v100", "h200", "a800"} <= multi
    for model in catalog:
        for alias in model.aliases:
            assert normalise_gpu_name(alias) not in multi, f"{model.name}: alias {alias!r}"


def test_every_model_names_a_source_and_sane_figures() -> None:
    for m in gpu_catalog():
        assert m.source.strip(), m.name
        assert m.memory_bandwidth_gbps > 10 * m.memory_gib**0.5, m.name
        if m.vendor == "NVIDIA":
            assert m.compute_capability is not None, m.name
        if m.tf32_tflops is None and m.bf16_tflops is not None:
            assert m.vendor == "AMD", f"{m.name}: NVIDIA parts with BF16 also have TF32"


@pytest.mark.parametrize(
    ("name", "fp32", "tf32", "fp16", "bf16", "fp8", "memory", "bandwidth"),
    [
        # Dense datasheet figures: a sparse figure typed in by mistake doubles these.
        ("A100-SXM4-80GB", 19.5, 156, 312, 312, None, 80, 2039),
        ("H100-SXM5-80GB", 67, 494.5, 989.5, 989.5, 1979, 80, 3350),
        ("H100-PCIE-80GB", 51, 378, 756.5, 756.5, 1513, 80, 2000),
        ("H200-SXM-141GB", 67, 494.5, 989.5, 989.5, 1979, 141, 4800),
        ("L4", 30.3, 60, 121, 121, 242.5, 24, 300),
        ("T4", 8.1, None, 65, None, None, 16, 300),
        ("V100-SXM2-16GB", 15.7, None, 125, None, None, 16, 900),
        ("K80", 4.37, None, None, None, None, 12, 240),
        ("MI300X", 81.7, 653.7, 1307.4, 1307.4, 2614.9, 192, 5300),
        ("B200", 75, 1100, 2250, 2250, 4500, 180, 8000),
    ],
)
def test_key_figures(
    name: str,
    fp32: float,
    tf32: float | None,
    fp16: float | None,
    bf16: float | None,
    fp8: float | None,
    memory: float,
    bandwidth: float,
) -> None:
    m = _model(name)
    assert (m.fp32_tflops, m.tf32_tflops, m.fp16_tflops, m.bf16_tflops, m.fp8_tflops) == (
        fp32,
        tf32,
        fp16,
        bf16,
        fp8,
    )
    assert (m.memory_gib, m.memory_bandwidth_gbps) == (memory, bandwidth)


def test_nominal_tflops_falls_back_for_parts_without_bf16() -> None:
    assert _model("H100-SXM5-80GB").nominal_tflops == 989.5
    assert _model("V100-SXM2-16GB").nominal_tflops == 125  # FP16 tensor
    assert _model("K80").nominal_tflops == 4.37  # FP32 only
    assert _model("P4").nominal_tflops == 5.5  # no useful FP16 path


# --- names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        # nvidia-smi product names
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIE-80GB"),
        ("NVIDIA H100 NVL", "H100-NVL-94GB"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("NVIDIA GeForce RTX 3090", "RTX-3090"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-ADA"),
        ("NVIDIA A40", "A40"),
        ("NVIDIA RTX A6000", "RTX-A6000"),
        ("NVIDIA H200", "H200-SXM-141GB"),
        ("AMD Instinct MI300X", "MI300X"),
        ("NVIDIA RTX 4000 SFF Ada Generation", "RTX-4000-SFF-ADA"),
        # GCP accelerator types
        ("nvidia-tesla-k80", "K80"),  # folds to the canonical name
        ("nvidia-tesla-p100", "P100"),
        ("nvidia-tesla-v100", "V100-SXM2-16GB"),  # folds to the family: its default
        ("nvidia-tesla-t4", "T4"),
        ("nvidia-l4", "L4"),
        ("nvidia-tesla-a100", "A100-SXM4-40GB"),  # likewise
        ("nvidia-a100-80gb", "A100-SXM4-80GB"),
        ("nvidia-h100-80gb", "H100-SXM5-80GB"),
        ("nvidia-h100-mega-80gb", "H100-SXM5-80GB"),
        ("nvidia-h200-141gb", "H200-SXM-141GB"),
        ("nvidia-b200", "B200"),
        # AWS / SkyPilot
        ("A10G", "A10G"),
        ("NVIDIA GeForce RTX 4080", "RTX-4080"),
        ("RTX_4080S", "RTX-4080-SUPER"),
        ("Quadro RTX 6000", "RTX-6000"),
        ("A100-80GB", "A100-SXM4-80GB"),
        ("V100-32GB", "V100-SXM2-32GB"),
        ("T4g", "T4"),
        # Lambda instance types
        ("gpu_1x_a100_sxm4", "A100-SXM4-40GB"),
        ("gpu_8x_a100_80gb_sxm4", "A100-SXM4-80GB"),
        ("gpu_1x_h100_pcie", "H100-PCIE-80GB"),
        ("gpu_8x_h100_sxm5", "H100-SXM5-80GB"),
        ("gpu_1x_a10", "A10"),
        ("gpu_1x_a6000", "RTX-A6000"),
        ("gpu_8x_v100", "V100-SXM2-16GB"),
        ("gpu_1x_gh200", "GH200"),
        ("gpu_1x_rtx6000", "RTX-6000"),
        # Vast / SkyPilot spellings
        ("H100_SXM", "H100-SXM5-80GB"),
        ("H100-SXM", "H100-SXM5-80GB"),
        ("RTX4090", "RTX-4090"),
        ("RTX3090", "RTX-3090"),
        ("A100-80GB-SXM", "A100-SXM4-80GB"),
        ("A100-SXM4", "A100-SXM4-40GB"),
        ("RTX6000-Ada", "RTX-6000-ADA"),
        ("L40S", "L40S"),
        ("A6000", "RTX-A6000"),
        ("H200", "H200-SXM-141GB"),
        # canonical names, any case and separators
        ("h100-nvl-94gb", "H100-NVL-94GB"),
        ("a800 sxm4 80gb", "A800-SXM4-80GB"),
    ],
)
def test_alias_resolves(spelling: str, expected: str) -> None:
    assert gpu_catalog().resolve(spelling).name == expected


@pytest.mark.parametrize(
    ("family", "memory", "expected"),
    [
        ("A100", 80, "A100-SXM4-80GB"),
        ("A100", 40, "A100-SXM4-40GB"),
        ("A100", 79.6, "A100-SXM4-80GB"),  # what a cloud reports for "80 GB"
        ("A100", None, "A100-SXM4-40GB"),
        ("H100", None, "H100-SXM5-80GB"),
        ("H100", 93.6, "H100-NVL-94GB"),
        ("V100", 32, "V100-SXM2-32GB"),
        ("H200", None, "H200-SXM-141GB"),
    ],
)
def test_family_with_memory(family: str, memory: float | None, expected: str) -> None:
    assert gpu_catalog().resolve(family, memory_gib=memory).name == expected


def test_match_family_gives_every_variant() -> None:
    catalog = gpu_catalog()
    assert [m.name for m in catalog.match("H100")] == [
        "H100-SXM5-80GB",
        "H100-PCIE-80GB",
        "H100-NVL-94GB",
    ]
    assert {m.name for m in catalog.match("a100")} == {
        "A100-SXM4-40GB",
        "A100-SXM4-80GB",
        "A100-PCIE-40GB",
        "A100-PCIE-80GB",
    }
    assert [m.name for m in catalog.match("NVIDIA A10G")] == ["A10G"]


@pytest.mark.parametrize(
    ("typo", "expected"),
    [
        ("H10", "H100"),
        ("A100-SXM-80", "A100-SXM4-80GB"),
        ("RTX409", "RTX-4090"),
        ("MI300", "MI300X"),
        ("A10OG", "A10G"),
    ],
)
def test_unknown_name_suggests(typo: str, expected: str) -> None:
    catalog = gpu_catalog()
    with pytest.raises(UnknownGpuError) as info:
        catalog.resolve(typo)
    assert expected in info.value.suggestions
    with pytest.raises(UnknownGpuError) as info:
        catalog.match(typo)
    assert expected in info.value.suggestions


def test_unknown_name_without_neighbour_has_no_suggestions() -> None:
    with pytest.raises(UnknownGpuError) as info:
        gpu_catalog().resolve("tpu-v5litepod")
    assert info.value.suggestions == []


# --- cross-checks against published data sets ----------------------------------

# gmasse-gpu-specs/data/specs.json key -> our models.
GMASSE: dict[str, list[str]] = {
    "h200_nvl": ["H200-NVL-141GB"],
    "h100": ["H100-PCIE-80GB"],  # its name is "H100" but the figures are the PCIe card's
    "l40s": ["L40S"],
    "l4": ["L4"],
    "rtx4090": ["RTX-4090"],
    "a100_pcie_40gb": ["A100-PCIE-40GB"],
    "a100_pcie_80gb": ["A100-PCIE-80GB"],
    "a100_sxm4_40gb": ["A100-SXM4-40GB"],
    "a100_sxm4_80gb": ["A100-SXM4-80GB"],
    "a10": ["A10"],
    "t4": ["T4"],
    "v100_pcie": ["V100-PCIE-16GB"],
    "v100_sxm2": ["V100-SXM2-16GB", "V100-SXM2-32GB"],
    # not ours: quadro_rtx_5000, v100s_pcie
}
# gmasse field stem -> our field. Its "fp16" column is NOT compared: it is the
# non-tensor (vector) FP16 rate (78 on A100, 204.9 on H100 PCIe), while our
# fp16_tflops is the tensor rate; only for T4 does that column hold the tensor
# figure (65), which the tensor check below cannot see since its
# fp16_tensor_core is null there.
GMASSE_TENSOR_FIELDS = {
    "tf32_tensor_core": "tf32_tflops",
    "fp16_tensor_core": "fp16_tflops",
    "bf16_tensor_core": "bf16_tflops",
    "fp8_tensor_core": "fp8_tflops",
}
GMASSE_SKIP = {
    # gmasse puts V100's FP16 tensor rate (112/125) in the TF32 column;
    # Volta has no TF32 (NVIDIA V100 datasheet), so ours is null.
    ("v100_pcie", "tf32_tensor_core"),
    ("v100_sxm2", "tf32_tensor_core"),
}
# NVIDIA's A100 datasheet says "40GB HBM2" / "80GB HBM2e"; gmasse calls both HBM2e.
GMASSE_MEMORY_TYPE_SKIP = {"a100_pcie_40gb", "a100_sxm4_40gb"}


def _load_gmasse() -> dict[str, dict[str, Any]]:
    data = json.loads((GPU_SPECS / "gmasse-gpu-specs" / "data" / "specs.json").read_text())
    data.pop("_header")
    return data


def _dense(row: dict[str, Any], field: str) -> float | None:
    """A dense figure from gmasse: the dense column, else sparse / 2; 0 means "no such path"."""
    dense, sparse = row.get(field), row.get(f"{field}_sparsity")
    if dense is not None:
        return float(dense)
    if sparse is not None:
        return float(sparse) / 2
    return None


def _check_gmasse(key: str, row: dict[str, Any], model: GpuModel) -> None:
    what = f"gmasse {key} vs {model.name}"
    _close(model.fp32_tflops, row["fp32"], f"{what} fp32")
    for field, ours_field in GMASSE_TENSOR_FIELDS.items():
        theirs = _dense(row, field)
        if theirs is None or (key, field) in GMASSE_SKIP:
            continue
        ours = getattr(model, ours_field)
        if theirs == 0:
            assert ours is None, f"{what} {field}: the part has no such path, ours is {ours}"
        else:
            _close(ours, theirs, f"{what} {field}")
    memory = row["gpu_memory"]
    sizes = [float(x) for x in memory.split("/")] if isinstance(memory, str) else [float(memory)]
    assert model.memory_gib in sizes, f"{what} memory"
    _close(model.memory_bandwidth_gbps, row["memory_bandwidth"], f"{what} bandwidth")
    if key not in GMASSE_MEMORY_TYPE_SKIP:
        assert model.memory_type.value.lower() == row["memory_type"].lower(), f"{what} memory type"
    assert model.architecture == row["architecture"], f"{what} architecture"
    assert float(model.compute_capability or 0) == float(row["cuda_compute_capability"]), what


@needs_specs
def test_gmasse_mapping_covers_its_file() -> None:
    assert set(_load_gmasse()) - set(GMASSE) == {"quadro_rtx_5000", "v100s_pcie"}


@needs_specs
@pytest.mark.parametrize(
    ("key", "name"), [(key, name) for key, names in GMASSE.items() for name in names]
)
def test_gmasse_figures_agree(key: str, name: str) -> None:
    _check_gmasse(key, _load_gmasse()[key], _model(name))


# llm-analysis gpu_configs/<stem>.json -> our model.
LLM_ANALYSIS: dict[str, str] = {
    "v100-pcie-16gb": "V100-PCIE-16GB",
    "v100-sxm-16gb": "V100-SXM2-16GB",
    "v100-sxm-32gb": "V100-SXM2-32GB",
    "a10-pcie-28gb": "A10",
    "a10g-pcie-24gb": "A10G",
    "a6000-48gb": "RTX-A6000",
    "a100-sxm-40gb": "A100-SXM4-40GB",
    "a100-sxm-80gb": "A100-SXM4-80GB",
    "a100-pcie-40gb": "A100-PCIE-40GB",
    "a100-pcie-80gb": "A100-PCIE-80GB",
    "h100-sxm-80gb": "H100-SXM5-80GB",
    "h100-pcie-80gb": "H100-PCIE-80GB",
    "mi210-64gb": "MI210",
    "mi250x-128gb": "MI250X",
    # not ours: v100-pcie-32gb, mi100-32gb, mi250-128gb
}
LLM_ANALYSIS_MEMORY_SKIP = {
    # Data errors in that file: "a10-pcie-28gb" says 28 GB (the A10 datasheet: 24 GB
    # GDDR6) and "v100-sxm-16gb" says 32 GB, contradicting its own name.
    "a10-pcie-28gb",
    "v100-sxm-16gb",
}
PCIE_ONLY_GBPS = 64  # a PCIe Gen4 x16 link, one direction: above this it is a GPU link


def _load_llm_analysis(stem: str) -> dict[str, Any]:
    path = GPU_SPECS / "llm-analysis-gpu-configs" / "llm_analysis" / "gpu_configs" / f"{stem}.json"
    return json.loads(path.read_text())


@needs_specs
@pytest.mark.parametrize(("stem", "name"), sorted(LLM_ANALYSIS.items()))
def test_llm_analysis_figures_agree(stem: str, name: str) -> None:
    row, model = _load_llm_analysis(stem), _model(name)
    what = f"llm-analysis {stem} vs {name}"
    if stem not in LLM_ANALYSIS_MEMORY_SKIP:
        _close(model.memory_gib, row["mem_per_GPU_in_GB"], f"{what} memory")
    _close(model.memory_bandwidth_gbps, row["hbm_bandwidth_in_GB_per_sec"], f"{what} bandwidth")
    # peak_fp16_TFLOPS is the dense FP16 tensor rate (312 for A100, 989 for H100 SXM).
    _close(model.fp16_tflops, row["peak_fp16_TFLOPS"], f"{what} fp16")
    # intra_node_bandwidth is one direction; ours is the total of both directions.
    # Parts without NVLink/Infinity Fabric list their PCIe link there instead.
    intra = row["intra_node_bandwidth_in_GB_per_sec"]
    if model.nvlink_bandwidth_gbps is None:
        assert intra <= PCIE_ONLY_GBPS, f"{what}: {intra} GB/s is a GPU link, ours is null"
    else:
        _close(model.nvlink_bandwidth_gbps / 2, intra, f"{what} GPU link")


@needs_specs
def test_llm_analysis_mapping_covers_its_folder() -> None:
    folder = GPU_SPECS / "llm-analysis-gpu-configs" / "llm_analysis" / "gpu_configs"
    stems = {p.stem for p in folder.glob("*.json")}
    assert stems - set(LLM_ANALYSIS) == {"v100-pcie-32gb", "mi100-32gb", "mi250-128gb"}


# thamada-gls/gpu_data.json "product" -> our model. Its "RTX 4000 Ada" is the
# 130 W full-height card (26.7 TFLOPS), not our 70 W RTX 4000 SFF Ada: not mapped.
THAMADA: dict[str, str] = {
    "MI300X": "MI300X",
    "L4": "L4",
    "L40S": "L40S",
    "H100 NVL": "H100-NVL-94GB",
    "H100 SXM": "H100-SXM5-80GB",
    "RTX 4090": "RTX-4090",
    "RTX 6000 Ada": "RTX-6000-ADA",
}
THAMADA_SKIP = {
    # 10,649.6 GB/s is twice AMD's 5.3 TB/s: the file doubles the effective
    # HBM3 data rate (8,192 bit x 10.4 GT/s); the real rate is 5.2 GT/s.
    ("MI300X", "vram_bw"),
    # 1,979 is the H100 SXM FP8 figure, copied: the same row's own 1,785 MHz clock
    # (60.3 FP32) cannot reach it. NVIDIA's H100 datasheet gives NVL 3,341 sparse.
    ("H100 NVL", "tflops_fp8_tensor"),
    ("H100 NVL", "tflops_fp8_tensor_sparse"),
}
# Its "tflops_fp16" is NOT compared: it is the non-tensor FP16 rate, computed from
# clocks and core counts (equal to FP32 on Ada: 30.3 for L4; 4x FP32 on Hopper),
# not the tensor rate our fp16_tflops holds. "tflops_fp32" is the vector FP32
# rate, which is what our fp32_tflops is, for MI300X too (81.7).
THAMADA_FIELDS = {
    "vram_size": ("memory_gib", 1.0),
    "vram_bw": ("memory_bandwidth_gbps", 1.0),
    "tflops_fp32": ("fp32_tflops", 1.0),
    "tflops_fp8_tensor": ("fp8_tflops", 1.0),
    "tflops_fp8_tensor_sparse": ("fp8_tflops", 2.0),
}


def _load_thamada() -> dict[str, dict[str, Any]]:
    rows = json.loads((GPU_SPECS / "thamada-gls" / "gpu_data.json").read_text())
    return {row["product"]: row for row in rows}


@needs_specs
@pytest.mark.parametrize(("product", "name"), sorted(THAMADA.items()))
def test_thamada_figures_agree(product: str, name: str) -> None:
    row, model = _load_thamada()[product], _model(name)
    compared = 0
    for field, (ours_field, factor) in THAMADA_FIELDS.items():
        if field not in row or (product, field) in THAMADA_SKIP:
            continue
        ours = getattr(model, ours_field)
        _close(None if ours is None else ours * factor, row[field], f"thamada {product} {field}")
        compared += 1
    assert compared >= 2


@needs_specs
def test_thamada_products_we_know_are_mapped() -> None:
    unmapped = set(_load_thamada()) - set(THAMADA)
    assert unmapped == {"RX 7900 XTX", "RTX 4060 Ti", "RTX 2000 Ada", "RTX 4000 Ada"}


# --- real names from real machines and catalogs -------------------------------

NVIDIA_SMI_NAMES: dict[str, str] = {
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA A10G": "A10G",
    "NVIDIA GeForce RTX 3060": "RTX-3060",
    "NVIDIA GeForce RTX 3090": "RTX-3090",
    "NVIDIA RTX 4000 SFF Ada Generation": "RTX-4000-SFF-ADA",
    "Tesla T4": "T4",
    "NVIDIA A40": "A40",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
    "NVIDIA H100 80GB HBM3": "H100-SXM5-80GB",
    "NVIDIA H100 NVL": "H100-NVL-94GB",
    "NVIDIA L4": "L4",
    "NVIDIA L40S": "L40S",
    "NVIDIA RTX 6000 Ada Generation": "RTX-6000-ADA",
}


@pytest.mark.skipif(not NVIDIA_SMI.is_dir(), reason=f"no nvidia-smi samples at {NVIDIA_SMI}")
def test_nvidia_smi_product_names_resolve() -> None:
    import re

    seen: set[str] = set()
    for path in NVIDIA_SMI.rglob("*"):
        if path.is_file() and path.suffix in {".xml", ".txt"}:
            text = path.read_text(errors="replace")
            seen.update(re.findall(r"<product_name>([^<]+)</product_name>", text))
            seen.update(re.findall(r"Product Name\s*:\s*(.+?)\s*$", text, flags=re.M))
    known = seen & set(NVIDIA_SMI_NAMES)
    assert len(known) >= 10, sorted(seen)
    for product in known:
        assert gpu_catalog().resolve(product).name == NVIDIA_SMI_NAMES[product], product


# (cloud, AcceleratorName, per-GPU GiB rounded) -> model. Every GPU row of the
# two files must be listed here, so a new name in the data fails this test.
SKYPILOT_EXPECTED: dict[tuple[str, str, int], str] = {
    ("lambda", "V100", 16): "V100-SXM2-16GB",
    ("lambda", "A6000", 48): "RTX-A6000",
    ("lambda", "A100", 40): "A100-SXM4-40GB",
    ("lambda", "A100-80GB", 80): "A100-SXM4-80GB",
    ("lambda", "A10", 24): "A10",
    ("lambda", "RTX6000", 24): "RTX-6000",  # Lambda's RTX 6000 is the 24 GB Turing card
    ("lambda", "H100", 80): "H100-SXM5-80GB",
    ("lambda", "GH200", 96): "GH200",
    ("vast", "H100", 80): "H100-SXM5-80GB",
    ("vast", "H100", 94): "H100-NVL-94GB",
    ("vast", "H200", 140): "H200-SXM-141GB",
    ("vast", "RTX5090", 32): "RTX-5090",
    ("vast", "RTX4090", 24): "RTX-4090",
    ("vast", "RTX4090", 48): "RTX-4090",  # 48 GB re-worked boards are still 4090s
    ("vast", "RTX4080", 16): "RTX-4080",
    ("vast", "RTX3090", 24): "RTX-3090",
    ("vast", "RTX3060", 12): "RTX-3060",
    ("vast", "RTX6000-Ada", 48): "RTX-6000-ADA",
    ("vast", "L40S", 45): "L40S",
    ("vast", "A100", 40): "A100-SXM4-40GB",
    ("vast", "A40", 45): "A40",
    ("vast", "A10", 22): "A10",
    ("vast", "RTXA6000", 48): "RTX-A6000",
    ("vast", "RTXA5000", 24): "RTX-A5000",
    ("vast", "RTXA4000", 16): "RTX-A4000",
    ("vast", "V100", 16): "V100-SXM2-16GB",
}

# Lambda instance types name the variant more precisely than AcceleratorName.
LAMBDA_INSTANCE_EXPECTED: dict[str, str] = {
    "gpu_1x_a100": "A100-SXM4-40GB",
    "gpu_1x_a100_sxm4": "A100-SXM4-40GB",
    "gpu_8x_a100_80gb_sxm4": "A100-SXM4-80GB",
    "gpu_1x_h100_pcie": "H100-PCIE-80GB",
    "gpu_1x_h100_sxm5": "H100-SXM5-80GB",
    "gpu_1x_rtx6000": "RTX-6000",
    "gpu_1x_gh200": "GH200",
    "gpu_8x_v100": "V100-SXM2-16GB",
    "gpu_1x_a10": "A10",
    "gpu_1x_a6000": "RTX-A6000",
}


def _skypilot_gpu_rows(cloud: str) -> list[tuple[str, str, float]]:
    """(InstanceType, AcceleratorName, per-GPU GiB) for every GPU row."""
    out = []
    with (SKYPILOT / cloud / "vms.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if not row["AcceleratorName"]:
                continue
            gpu = ast.literal_eval(row["GpuInfo"])["Gpus"][0]
            mib = gpu["MemoryInfo"]["SizeInMiB"]
            # Vast's SizeInMiB is the whole machine's; Lambda's is one GPU's.
            if cloud == "vast":
                mib /= gpu["Count"]
            out.append((row["InstanceType"], row["AcceleratorName"], mib / 1024))
    return out


@needs_skypilot
@pytest.mark.parametrize("cloud", ["lambda", "vast"])
def test_skypilot_accelerator_names_resolve(cloud: str) -> None:
    catalog = gpu_catalog()
    rows = _skypilot_gpu_rows(cloud)
    assert len(rows) > 10
    for instance, accelerator, gib in rows:
        key = (cloud, accelerator, round(gib))
        assert key in SKYPILOT_EXPECTED, f"{instance}: {key} not in the expected table"
        assert catalog.resolve(accelerator, memory_gib=gib).name == SKYPILOT_EXPECTED[key], instance


@needs_skypilot
def test_lambda_instance_types_resolve() -> None:
    catalog = gpu_catalog()
    for instance, _, gib in _skypilot_gpu_rows("lambda"):
        single = "gpu_1x_" + instance.split("_", 2)[2]
        expected = LAMBDA_INSTANCE_EXPECTED.get(instance) or LAMBDA_INSTANCE_EXPECTED[single]
        assert catalog.resolve(instance, memory_gib=gib).name == expected, instance
