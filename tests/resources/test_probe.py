"""The probe: the NumPy path always (real runs and a fake clock), the PyTorch CPU path when installed."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime

import pytest

from spothop.errors import ConfigError
from spothop.resources import probe as probe_mod
from spothop.resources.probe import Backend, Dtype, ProbeSizes, probe

TINY = ProbeSizes(matmul_n=64, copy_mib=1, transfer_mib=1, warmup_runs=1, timed_runs=3)
FIXED_NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


class StepClock:
    """Every reading is ``step`` seconds after the last: each timed run lasts exactly one step."""

    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_numpy_probe_measures_real_figures() -> None:
    result = probe(budget_s=5, sizes=TINY, backend="numpy")
    assert result.backend is Backend.NUMPY
    assert result.gpu_count == 0
    assert result.fp32_tflops is not None and result.fp32_tflops > 0
    assert result.memory_bandwidth_gbps is not None and result.memory_bandwidth_gbps > 0
    assert result.bf16_tflops is None and "bfloat16" in result.unsupported["bf16_tflops"]
    assert result.fp16_tflops is None and "float16" in result.unsupported["fp16_tflops"]
    assert result.h2d_bandwidth_gbps is None and result.p2p_bandwidth_gbps == ()
    assert result.samples == {"fp32_tflops": 3, "memory_bandwidth_gbps": 3}
    assert result.matmul_n == {"fp32_tflops": 64}
    assert result.headline_tflops == result.fp32_tflops
    assert 0 < result.duration_s < 5


def test_figures_are_flops_and_bytes_over_median_time() -> None:
    result = probe(
        budget_s=1000, sizes=TINY, backend="numpy", clock=StepClock(0.5), now=lambda: FIXED_NOW
    )
    assert result.fp32_tflops == pytest.approx(2 * 64**3 / 0.5 / 1e12)
    # A copy reads and writes each byte.
    assert result.memory_bandwidth_gbps == pytest.approx(2 * 1024 * 1024 / 0.5 / 1e9)
    assert result.measured_at == FIXED_NOW
    assert result.budget_s == 1000


def test_budget_cuts_timed_runs_but_keeps_one() -> None:
    sizes = TINY.model_copy(update={"timed_runs": 50})
    result = probe(budget_s=2, sizes=sizes, backend="numpy", clock=StepClock(1.0))
    assert result.samples["fp32_tflops"] == 1
    assert result.samples["memory_bandwidth_gbps"] == 1


def test_generous_budget_takes_every_timed_run() -> None:
    sizes = TINY.model_copy(update={"timed_runs": 7})
    result = probe(budget_s=10_000, sizes=sizes, backend="numpy", clock=StepClock(1.0))
    assert result.samples["fp32_tflops"] == 7


def test_slow_dtype_gets_a_smaller_matrix() -> None:
    class SlowDevice:
        """Runs take n^3 ns: a 4096 matmul would need 69 s, a 512 one 0.13 s."""

        def matmul(self, dtype: Dtype, n: int) -> probe_mod.RunOnce:
            return lambda: n**3 * 1e-9

    sizes = ProbeSizes(matmul_n=4096, warmup_runs=1)
    run = probe_mod._Run(sizes, budget_s=1.0, start=0.0, clock=lambda: 0.0, say=lambda _m: None)
    assert probe_mod._fitting_matmul_n(SlowDevice(), Dtype.FP32, run, deadline=1.0) == 512  # type: ignore[arg-type]
    roomy = probe_mod._Run(
        sizes, budget_s=1000.0, start=0.0, clock=lambda: 0.0, say=lambda _m: None
    )
    assert probe_mod._fitting_matmul_n(SlowDevice(), Dtype.FP32, roomy, deadline=1000.0) == 4096  # type: ignore[arg-type]


def test_progress_reports_each_phase() -> None:
    messages: list[str] = []
    probe(budget_s=5, sizes=TINY, backend="numpy", progress=messages.append)
    assert "fp32 matmul n=64: warming up" in messages
    assert "memory copy: 3 timed runs" in messages


def test_without_torch_numpy_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    assert probe(budget_s=5, sizes=TINY).backend is Backend.NUMPY
    with pytest.raises(ConfigError, match="needs PyTorch"):
        probe(budget_s=5, sizes=TINY, backend="torch-cpu")


@pytest.mark.parametrize("budget", [0, -1])
def test_budget_must_be_positive(budget: float) -> None:
    with pytest.raises(ConfigError, match="budget must be positive"):
        probe(budget_s=budget, sizes=TINY, backend="numpy")


def test_torch_cpu_measures_all_three_dtypes() -> None:
    pytest.importorskip("torch")
    result = probe(budget_s=10, sizes=TINY, backend="torch-cpu")
    assert result.backend is Backend.TORCH_CPU
    for dtype in Dtype:
        value = result.tflops(dtype)
        assert value is not None and value > 0, dtype
    assert result.headline_tflops == result.bf16_tflops
    assert result.unsupported == {
        "h2d_bandwidth_gbps": "no GPU: host-to-device needs one",
        "p2p_bandwidth_gbps": "needs two or more GPUs",
    }


def test_torch_cuda_without_a_gpu_is_refused() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ConfigError, match="needs a CUDA GPU"):
        probe(budget_s=5, sizes=TINY, backend="torch-cuda")
