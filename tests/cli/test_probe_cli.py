"""``spothop probe`` and ``spothop topo parse`` through the real entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.resources import probe as probe_mod
from spothop.resources.probe import ProbeSizes

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "nvidia-smi"
TINY = ProbeSizes(matmul_n=64, copy_mib=1, transfer_mib=1, warmup_runs=1, timed_runs=2)


def sample(relative: str) -> str:
    path = DATA / relative
    if not path.is_file():
        pytest.skip(f"shared sample {path} is not present")
    return str(path)


@pytest.fixture(autouse=True)
def tiny_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(probe_mod, "CPU_SIZES", TINY)
    monkeypatch.setenv("SPOTHOP_HOME", str(tmp_path / "home"))


def test_probe_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--json", "--budget-s", "5", "--backend", "numpy"]) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["backend"] == "numpy"
    assert result["fp32_tflops"] > 0 and result["memory_bandwidth_gbps"] > 0
    assert result["sizes"]["matmul_n"] == 64
    assert "probe: fp32 matmul n=64: warming up" in err  # progress goes to stderr, JSON stays clean


def test_probe_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--budget-s", "5", "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "FP32 dense matmul" in out and "TFLOPS" in out
    assert "NumPy has no bfloat16" in out


def test_probe_record_refuses_a_cpu_result(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert (
        main(["probe", "--budget-s", "5", "--backend", "numpy", "--record", "aws/p5.48xlarge"]) == 2
    )
    err = capsys.readouterr().err
    assert "error:" in err and "needs a CUDA GPU" in err
    assert not (tmp_path / "home" / "measured.json").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["probe", "--record", "p5.48xlarge"], "--record expects PROVIDER/INSTANCE_TYPE"),
        (["probe", "--backend", "cuda"], "--backend must be one of torch-cuda, torch-cpu, numpy"),
        (["probe", "--budget-s", "0"], "--budget-s must be greater than 0 and at most 3600 s"),
        (["probe", "--budget-s", "nan"], "--budget-s must be greater than 0 and at most 3600 s"),
        (["probe", "--if-unmeasured"], "--if-unmeasured only makes sense with --record"),
    ],
)
def test_probe_bad_flags(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_topo_parse_rtx4090_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "parse", sample("topo/8x_rtx4090_pcie_topo.txt"), "--choose", "3"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "nvidia-smi topo -m, 8 GPU(s)" in out
    assert "communication cost" in out
    assert "chosen 3 GPU(s): GPU0, GPU1, GPU2 (total pairwise cost 3.00)" in out


def test_topo_parse_dgx_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "topo",
                "parse",
                sample("topo/dgx_a100_40gb_topo_PARTIAL.txt"),
                "--json",
                "--choose",
                "2",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["chosen"] == [0, 1]
    assert data["links"][0][1] == "NV12"
    assert data["links"][4][5] is None
    assert data["cost_matrix"][0][1] == 1.0
    assert data["gpus"][0]["cpu_affinity"] == "48-63,176-191"
    assert data["notes"]


def test_topo_parse_query_text_shows_bus_ids_literally(capsys: pytest.CaptureFixture[str]) -> None:
    # 00000000:AB:00.0 must not turn into the :AB: emoji.
    assert main(["topo", "parse", sample("thamada-text/H100SXMx8_smi_-a.txt"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # The log lists no NVLinks, but all eight GPUs joined the NVSwitch fabric: NV18 between every pair.
    assert {
        cell for i, row in enumerate(data["links"]) for j, cell in enumerate(row) if i != j
    } == {"NV18"}
    assert data["gpus"][5]["pci_bus_id"] == "00000000:AB:00.0"
    assert main(["topo", "parse", sample("thamada-text/H100SXMx8_smi_-a.txt")]) == 0
    out = capsys.readouterr().out
    assert "🆎" not in out
    assert "NV18" in out and "links inferred" in " ".join(out.split())


@pytest.mark.parametrize(
    ("relative", "message"),
    [
        ("thamada-text/L4_deviceQuery.txt", "unsupported format: this is CUDA deviceQuery output"),
        ("no/such/file.txt", "no such file"),
    ],
)
def test_topo_parse_errors_are_one_line(
    relative: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(DATA / relative) if relative.startswith("no/") else sample(relative)
    assert main(["topo", "parse", path]) == (
        3 if relative.startswith("no/") else 2
    )  # not found, or bad input
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error:") and message in err
    assert "Traceback" not in err


def test_topo_choose_too_many(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "parse", sample("topo/8x_rtx4090_pcie_topo.txt"), "--choose", "9"]) == 2
    assert "cannot choose 9 GPUs from 8" in capsys.readouterr().err
