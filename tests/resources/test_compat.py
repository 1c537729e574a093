"""The hardware compatibility matrix: which GPU a checkpoint may move to, and why not."""

from __future__ import annotations

import pytest

from spothop.errors import ConfigError, UnknownGpuError
from spothop.resources.compat import (
    CompatNeed,
    compat_matrix,
    compatible,
    load_matrix,
    parse_compute_capability,
)
from spothop.resources.gpus import gpu_catalog


def test_every_catalog_gpu_has_its_architecture_in_the_matrix() -> None:
    matrix = compat_matrix()
    missing = {m.architecture for m in gpu_catalog() if matrix.place_of(m.architecture) is None}
    assert missing == set()


def test_an_older_architecture_is_refused_with_the_matrix_reason() -> None:
    verdict = compatible("H100-SXM5-80GB", "V100-SXM2-16GB")
    assert not verdict.ok
    assert verdict.reasons == (
        "H100-SXM5-80GB → V100-SXM2-16GB: architecture Volta is older than the checkpoint's Hopper",
    )


def test_the_same_or_a_newer_family_is_accepted() -> None:
    assert compatible("A100-SXM4-40GB", "A100-SXM4-80GB").ok
    assert compatible("A100-SXM4-40GB", "H100-SXM5-80GB").ok
    assert compatible("A100-SXM4-40GB", "L40S").ok  # Ada is newer than Ampere
    assert compatible("V100-SXM2-16GB", "B200").ok


@pytest.mark.parametrize(
    ("source", "target"), [("A100-SXM4-80GB", "MI300X"), ("MI250X", "H100-SXM5-80GB")]
)
def test_a_checkpoint_never_crosses_vendor_stacks(source: str, target: str) -> None:
    verdict = compatible(source, target)
    assert not verdict.ok
    assert len(verdict.reasons) == 1
    assert "vendor stack" in verdict.reason
    assert "is not the checkpoint's" in verdict.reason


def test_amd_families_are_ordered_among_themselves() -> None:
    assert compatible("MI250X", "MI300X").ok
    refused = compatible("MI300X", "MI210")
    assert (
        refused.reason
        == "MI300X → MI210: architecture CDNA 2 is older than the checkpoint's CDNA 3"
    )


def test_a_declared_minimum_replaces_the_checkpoints_own_family() -> None:
    need = CompatNeed(min_architecture="Ampere")
    assert compatible("H100-SXM5-80GB", "A100-SXM4-80GB", need).ok
    verdict = compatible("H100-SXM5-80GB", "T4", need)
    assert verdict.reasons == (
        "H100-SXM5-80GB → T4: architecture Turing is older than the job's minimum Ampere",
    )
    # A family alias ("Ada") is the family it names.
    assert not compatible("A100-SXM4-80GB", "A100-SXM4-80GB", CompatNeed("Ada")).ok


def test_compute_capability_below_the_jobs_need_is_refused() -> None:
    need = CompatNeed(min_architecture="Volta", min_compute_capability="8.0")
    verdict = compatible("A100-SXM4-40GB", "T4", need)
    assert verdict.reasons == (
        "A100-SXM4-40GB → T4: compute capability 7.5 is below the job's need 8.0",
    )
    assert compatible("A100-SXM4-40GB", "A10G", need).ok  # 8.6 ≥ 8.0
    amd = compatible("MI300X", "MI300X", CompatNeed(min_compute_capability="8.0"))
    assert amd.reasons == (
        "MI300X → MI300X: MI300X has no CUDA compute capability; the job needs 8.0",
    )


def test_memory_per_gpu_must_hold_the_state() -> None:
    need = CompatNeed(state_memory_gib=60)
    verdict = compatible("A100-SXM4-80GB", "A100-SXM4-40GB", need)
    assert verdict.reasons == (
        "A100-SXM4-80GB → A100-SXM4-40GB: 40 GiB per GPU is less than the 60.0 GiB of state per GPU",
    )
    assert compatible("A100-SXM4-80GB", "H100-SXM5-80GB", need).ok


def test_every_broken_rule_has_its_own_reason() -> None:
    verdict = compatible(
        "H100-SXM5-80GB",
        "V100-SXM2-16GB",
        CompatNeed(min_compute_capability="9.0", state_memory_gib=40),
    )
    assert len(verdict.reasons) == 3
    assert [r.split(": ", 1)[1].split(" ")[0] for r in verdict.reasons] == [
        "architecture",
        "compute",
        "16",
    ]


def test_a_manifests_size_raises_the_need_never_lowers_it() -> None:
    need = CompatNeed(state_memory_gib=30)
    assert need.at_least(10).state_memory_gib == 30
    assert need.at_least(50).state_memory_gib == 50
    assert CompatNeed().at_least(None).state_memory_gib is None


def test_gpu_spellings_resolve_through_the_catalog() -> None:
    verdict = compatible("NVIDIA A100-SXM4-40GB", "nvidia-tesla-v100")
    assert verdict.source == "A100-SXM4-40GB"
    assert verdict.target == "V100-SXM2-16GB"
    with pytest.raises(UnknownGpuError):
        compatible("A1OO", "H100")


@pytest.mark.parametrize("bad", ["8", "eight.zero", "8.0.1", ""])
def test_a_malformed_compute_capability_is_refused_clearly(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"MAJOR\.MINOR"):
        CompatNeed(min_compute_capability=bad)
    assert parse_compute_capability(" 9.0 ") == (9, 0)


def test_an_unknown_minimum_architecture_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="Hopper"):
        compatible("A100-SXM4-40GB", "H100", CompatNeed(min_architecture="Fermi"))


def test_an_architecture_missing_from_the_matrix_is_refused_with_how_to_fix_it() -> None:
    matrix = load_matrix("stacks:\n  - {name: CUDA, vendor: NVIDIA, families: [Ampere, Hopper]}\n")
    verdict = matrix.compatible("A100-SXM4-40GB", "T4")
    assert not verdict.ok
    assert "architecture Turing (T4) is not in the compatibility matrix" in verdict.reason
    assert "compat.yaml" in verdict.reason


def test_a_matrix_without_stacks_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="stacks"):
        load_matrix("families: [Ampere]\n")
    with pytest.raises(ValueError, match="twice"):
        load_matrix("stacks:\n  - {name: A, vendor: X, families: [Ampere, Ampere]}\n")


def test_the_table_judges_every_catalog_gpu_in_catalog_order() -> None:
    found = compat_matrix().table("A100-SXM4-40GB")
    rows = [v for _, v in found.rows]
    assert [v.target for v in rows] == [m.name for m in gpu_catalog()]
    assert found.accepted == sum(v.ok for v in rows)
    ok = {v.target for v in rows if v.ok}
    assert {"A100-SXM4-40GB", "H100-SXM5-80GB", "B200", "L4"} <= ok
    assert not ok & {"V100-SXM2-16GB", "T4", "K80", "MI300X"}
    assert all(v.reasons for v in rows if not v.ok)


def test_a_spec_replica_must_be_another_store_and_its_key_a_place() -> None:
    from spothop.errors import JobSpecError
    from spothop.jobs.spec import load_job

    base = {"name": "t", "run": "x"}
    with pytest.raises(JobSpecError, match="is the checkpoint url itself"):
        load_job({**base, "checkpoint": {"url": "s3://a/run", "replicas": {"r1": "s3://a/run/"}}})
    with pytest.raises(JobSpecError, match="region or provider/region"):
        load_job({**base, "checkpoint": {"url": "s3://a/run", "replicas": {"a/b/c": "s3://b"}}})
    spec = load_job({**base, "checkpoint": {"url": "s3://a/run", "replicas": {"aws/r1": "s3://b"}}})
    assert spec.checkpoint is not None and spec.checkpoint.replicas == {"aws/r1": "s3://b"}
