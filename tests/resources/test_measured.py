"""The measured-figures store: round trips, combining samples, dtype fallback, corrupt files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from spothop.errors import ConfigError, SpothopError
from spothop.resources.measured import (
    all_measurements,
    measured_path,
    measured_tflops,
    record_probe,
)
from spothop.resources.probe import Backend, ProbeResult, ProbeSizes


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def gpu_result(
    bf16: float | None = 700.0,
    fp16: float | None = 710.0,
    fp32: float | None = 50.0,
    runs: int = 10,
) -> ProbeResult:
    figures = {"bf16_tflops": bf16, "fp16_tflops": fp16, "fp32_tflops": fp32}
    return ProbeResult(
        device_name="NVIDIA H100 80GB HBM3, PyTorch 2.13.0",
        backend=Backend.TORCH_CUDA,
        gpu_count=8,
        memory_bandwidth_gbps=3000.0,
        samples={k: runs for k, v in figures.items() if v is not None},
        sizes=ProbeSizes(),
        budget_s=60,
        duration_s=42.0,
        measured_at=datetime(2025, 1, 1, tzinfo=UTC),
        **figures,
    )


def test_home_defaults_and_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    assert measured_path() == home / "measured.json"
    monkeypatch.delenv("SPOTHOP_HOME")
    assert measured_path() == Path("~/.spothop/measured.json").expanduser()


def test_nothing_recorded_is_none(home: Path) -> None:
    assert measured_tflops("aws", "p5.48xlarge") is None
    assert all_measurements() == []
    assert not home.exists()  # reading never creates the file


def test_record_round_trips(home: Path) -> None:
    record = record_probe("aws", "p5.48xlarge", gpu_result())
    assert measured_tflops("aws", "p5.48xlarge") == 700.0
    assert measured_tflops("aws", "p4d.24xlarge") is None
    assert measured_tflops("gcp", "p5.48xlarge") is None
    [stored] = all_measurements()
    assert stored == record
    assert stored.result.samples["bf16_tflops"] == 10
    raw = json.loads((home / "measured.json").read_text())
    assert raw["version"] == 1 and raw["records"][0]["instance_type"] == "p5.48xlarge"
    assert [p.name for p in home.iterdir()] == ["measured.json"]  # no temporary file left behind


def test_samples_combine_as_run_weighted_mean() -> None:
    record_probe("aws", "p5.48xlarge", gpu_result(bf16=600.0, runs=1))
    record_probe("aws", "p5.48xlarge", gpu_result(bf16=700.0, runs=3))
    assert measured_tflops("aws", "p5.48xlarge") == pytest.approx((600 * 1 + 700 * 3) / 4)
    assert len(all_measurements()) == 2


def test_falls_back_to_fp16_then_fp32() -> None:
    record_probe("azure", "Standard_NC6s_v3", gpu_result(bf16=None, fp16=110.0, fp32=14.0))
    assert measured_tflops("azure", "Standard_NC6s_v3") == 110.0
    record_probe("lambda", "gpu_1x_k80", gpu_result(bf16=None, fp16=None, fp32=4.1))
    assert measured_tflops("lambda", "gpu_1x_k80") == 4.1


def test_cpu_results_are_not_recorded() -> None:
    cpu = gpu_result().model_copy(
        update={"backend": Backend.NUMPY, "gpu_count": 0, "device_name": "CPU (AMD EPYC)"}
    )
    with pytest.raises(ConfigError, match=r"ran on CPU \(AMD EPYC\) \(backend numpy\), not a GPU"):
        record_probe("aws", "p5.48xlarge", cpu)
    assert all_measurements() == []


def test_blank_names_are_refused() -> None:
    with pytest.raises(ConfigError, match="needs a provider and an instance type"):
        record_probe("aws", " ", gpu_result())


def _with(**change: object) -> str:
    """A measured-figures file of one record whose probe result has ``change`` applied."""
    result = json.loads(gpu_result().model_dump_json()) | change
    record = {
        "provider": "aws",
        "instance_type": "p5.48xlarge",
        "recorded_at": "2025-01-01T00:00:00Z",
        "result": result,
    }
    return json.dumps({"version": 1, "records": [record]})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"not valid JSON \(line 1"),
        ('{"version": 7, "records": []}', "expected a measured-figures file of version 1, got 7"),
        ("[]", "got None"),
        (
            '{"version": 1, "records": [{"provider": "aws"}]}',
            r"malformed record at records\.0\.instance_type",
        ),
        ("[" * 100_000, "cannot read the measured figures"),
        *[
            (_with(**change), message)
            for change, message in [
                (
                    {"bf16_tflops": float("nan")},
                    r"records\.0\.result\.bf16_tflops must be greater than 0 .* got nan",
                ),
                ({"fp32_tflops": -50.0}, r"fp32_tflops must be greater than 0"),
                (
                    {"bf16_tflops": 1e300},
                    r"bf16_tflops must be greater than 0 and at most 100000 TFLOPS",
                ),
                ({"memory_bandwidth_gbps": float("inf")}, r"memory_bandwidth_gbps must be"),
                ({"samples": {"bf16_tflops": 0}}, r"samples\.bf16_tflops must be between 1 and"),
            ]
        ],
    ],
)
def test_corrupt_file_says_which_and_how_to_fix(home: Path, content: str, message: str) -> None:
    home.mkdir(parents=True)
    (home / "measured.json").write_text(content)
    with pytest.raises(SpothopError, match=message) as caught:
        measured_tflops("aws", "p5.48xlarge")
    assert str(home / "measured.json") in str(caught.value)
    assert "delete it" in str(caught.value)


def test_changes_on_disk_are_seen() -> None:
    record_probe("aws", "p5.48xlarge", gpu_result(bf16=600.0))
    assert measured_tflops("aws", "p5.48xlarge") == 600.0
    measured_path().unlink()
    assert measured_tflops("aws", "p5.48xlarge") is None
