"""Measure what a machine really delivers: dense matmul TFLOPS and memory bandwidths.

The catalog's TFLOPS are the vendor's peak; a rented GPU can fall short of it
(power caps, clocks, a noisy neighbour on a shared host, a PCIe slot at Gen1).
The probe measures, on the first device:

- dense matmul TFLOPS in BF16, FP16 and FP32: ``C = A @ B`` on square n x n
  matrices, counted as 2 n^3 floating-point operations;
- device memory bandwidth: a device-to-device copy of a large buffer, counted
  as read plus write (2 x bytes / time, as STREAM's "Copy" does);
- host-to-device bandwidth (GPU only): pinned host memory to device, bytes / time;
- peer-to-peer bandwidth per ordered GPU pair (GPU only, two or more GPUs).

Each figure gets warm-up runs (a cold run pays for allocation, kernel selection
and clock ramp-up), then timed runs, and reports the median, which one slow
outlier cannot move. All figures share one time budget: each phase gets an
equal share of what is left, and stops its timed runs when its share is spent
(after at least one). A single run is never cut short, so the probe can
overrun the budget by at most one run per phase; sizes should be chosen to
keep one run short.

Backends, best first: PyTorch on CUDA (timed with CUDA events, so host-side
launch overhead is excluded), PyTorch on CPU, NumPy on CPU. PyTorch is an
optional extra and is imported only when the probe runs. NumPy has no bfloat16
and no BLAS kernel for float16, so those figures are reported as unsupported,
never as a number.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from spothop.errors import ConfigError

DEFAULT_BUDGET_S = 60.0
MIB = 1024 * 1024
BYTES_PER_GB = 1e9  # bandwidths in decimal GB/s, as vendors quote them
FLOPS_PER_TFLOP = 1e12


class Dtype(StrEnum):
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"


class Backend(StrEnum):
    TORCH_CUDA = "torch-cuda"
    TORCH_CPU = "torch-cpu"
    NUMPY = "numpy"


class ProbeSizes(BaseModel):
    """How big each measurement is; tests pass tiny ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    matmul_n: int = Field(8192, ge=1, description="side of the square matrices")
    copy_mib: int = Field(1024, ge=1, description="device copy buffer; larger than any cache")
    transfer_mib: int = Field(256, ge=1, description="host-to-device and peer-to-peer buffer")
    warmup_runs: int = Field(2, ge=1)
    timed_runs: int = Field(10, ge=1)


# 8192^3 matmuls and a 1 GiB copy are what it takes for an H100/H200 to reach its
# plateau (the H200's 50 MB L2 must not hold the buffer). A CPU gets smaller ones:
# a 2048 FP32 matmul is 17 GFLOP, about a second on two cores.
GPU_SIZES = ProbeSizes()
CPU_SIZES = ProbeSizes(matmul_n=2048, copy_mib=256, transfer_mib=64, warmup_runs=1, timed_runs=5)


class PeerBandwidth(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    src_gpu: int
    dst_gpu: int
    bandwidth_gbps: float
    samples: int


class ProbeResult(BaseModel):
    """What one probe run measured. A ``None`` figure was not measured; ``unsupported`` says why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device_name: str
    backend: Backend
    gpu_count: int = Field(ge=0, description="GPUs visible; 0 on a CPU-only machine")
    bf16_tflops: float | None = None
    fp16_tflops: float | None = None
    fp32_tflops: float | None = None
    memory_bandwidth_gbps: float | None = Field(None, description="device copy, read + write, GB/s")
    h2d_bandwidth_gbps: float | None = Field(
        None, description="pinned host to device, GB/s; None without a GPU"
    )
    p2p_bandwidth_gbps: tuple[PeerBandwidth, ...] = ()
    matmul_n: dict[str, int] = Field(
        default_factory=dict,
        description="matrix side used per figure; below sizes.matmul_n when the budget forced it",
    )
    samples: dict[str, int] = Field(
        default_factory=dict, description="timed runs behind each figure"
    )
    unsupported: dict[str, str] = Field(
        default_factory=dict, description="figure -> why it was not measured"
    )
    sizes: ProbeSizes
    budget_s: float
    duration_s: float
    measured_at: datetime

    def tflops(self, dtype: Dtype) -> float | None:
        return {
            Dtype.BF16: self.bf16_tflops,
            Dtype.FP16: self.fp16_tflops,
            Dtype.FP32: self.fp32_tflops,
        }[dtype]

    @property
    def headline_tflops(self) -> float | None:
        """BF16, else FP16, else FP32: the figure the catalog compares (see ``GpuModel.nominal_tflops``)."""
        for dtype in Dtype:
            value = self.tflops(dtype)
            if value is not None:
                return value
        return None


Clock = Callable[[], float]
RunOnce = Callable[[], float]  # runs the operation once, returns its seconds


class _Device(Protocol):
    backend: Backend
    name: str
    gpu_count: int

    def matmul(self, dtype: Dtype, n: int) -> RunOnce | str: ...
    def copy(self, nbytes: int) -> RunOnce: ...
    def host_to_device(self, nbytes: int) -> RunOnce | str: ...
    def peer_copy(self, src: int, dst: int, nbytes: int) -> RunOnce: ...


# -- the probe -------------------------------------------------------------------


def probe(
    budget_s: float = DEFAULT_BUDGET_S,
    sizes: ProbeSizes | None = None,
    backend: Backend | str | None = None,
    clock: Clock = time.perf_counter,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    progress: Callable[[str], None] | None = None,
) -> ProbeResult:
    """Measure this machine within ``budget_s`` seconds (see the module docstring).

    ``backend`` forces one of :class:`Backend` (default: the best available);
    ``clock`` times CPU runs and the budget, so tests can inject a fake one.
    """
    if not 0 < budget_s < math.inf:  # also refuses NaN
        raise ConfigError(f"the probe budget must be positive (and finite) seconds; got {budget_s}")
    # The budget covers opening the device too: importing torch and creating a
    # CUDA context take seconds, and the agent waits on the whole probe.
    started_at, start = now(), clock()
    device = _open_device(Backend(backend) if backend else None, clock)
    sizes = sizes or (GPU_SIZES if device.backend is Backend.TORCH_CUDA else CPU_SIZES)
    run = _Run(sizes, budget_s, start, clock, progress or (lambda _msg: None))
    figures = _measure_all(device, run)
    return ProbeResult(
        device_name=device.name,
        backend=device.backend,
        gpu_count=device.gpu_count,
        sizes=sizes,
        budget_s=budget_s,
        duration_s=clock() - start,
        measured_at=started_at,
        **figures,
    )


@dataclass
class _Run:
    sizes: ProbeSizes
    budget_s: float
    start: float
    clock: Clock
    say: Callable[[str], None]

    def share(self, phases_left: int) -> float:
        """The deadline for the next phase: an equal share of the time still left."""
        now = self.clock()
        left = max(0.0, self.start + self.budget_s - now)
        return now + left / max(1, phases_left)

    def timed(self, label: str, op: RunOnce, deadline: float) -> tuple[float, int]:
        """Median seconds of the timed runs of ``op`` and how many there were."""
        self.say(f"{label}: warming up")
        for _ in range(self.sizes.warmup_runs):
            op()
            if self.clock() >= deadline:
                break
        times = [op()]
        while len(times) < self.sizes.timed_runs and self.clock() < deadline:
            times.append(op())
        self.say(f"{label}: {len(times)} timed runs")
        return statistics.median(times), len(times)


def _measure_all(device: _Device, run: _Run) -> dict[str, Any]:
    sizes = run.sizes
    out: dict[str, Any] = {"samples": {}, "unsupported": {}}
    pairs = [(s, d) for s in range(device.gpu_count) for d in range(device.gpu_count) if s != d]
    phases = len(Dtype) + 2 + len(pairs)
    out["matmul_n"] = {}
    for dtype in Dtype:
        key = f"{dtype.value}_tflops"
        deadline = run.share(phases)
        phases -= 1
        n = _fitting_matmul_n(device, dtype, run, deadline)
        if isinstance(n, str):
            out["unsupported"][key] = n
            continue
        op = device.matmul(dtype, n)
        if isinstance(op, str):
            out["unsupported"][key] = op
            continue
        seconds, count = run.timed(f"{dtype.value} matmul n={n}", op, deadline)
        out[key], out["samples"][key] = 2 * n**3 / seconds / FLOPS_PER_TFLOP, count
        out["matmul_n"][key] = n
    copy_bytes = sizes.copy_mib * MIB
    seconds, count = run.timed("memory copy", device.copy(copy_bytes), run.share(phases))
    # A copy reads and writes every byte once.
    out["memory_bandwidth_gbps"] = 2 * copy_bytes / seconds / BYTES_PER_GB
    out["samples"]["memory_bandwidth_gbps"] = count
    phases -= 1
    transfer = sizes.transfer_mib * MIB
    h2d = device.host_to_device(transfer)
    if isinstance(h2d, str):
        out["unsupported"]["h2d_bandwidth_gbps"] = h2d
    else:
        seconds, count = run.timed("host to device", h2d, run.share(phases))
        out["h2d_bandwidth_gbps"] = transfer / seconds / BYTES_PER_GB
        out["samples"]["h2d_bandwidth_gbps"] = count
    phases -= 1
    peers = []
    for src, dst in pairs:
        seconds, count = run.timed(
            f"GPU{src} -> GPU{dst}", device.peer_copy(src, dst, transfer), run.share(phases)
        )
        peers.append(
            PeerBandwidth(
                src_gpu=src,
                dst_gpu=dst,
                bandwidth_gbps=transfer / seconds / BYTES_PER_GB,
                samples=count,
            )
        )
        phases -= 1
    if device.gpu_count < 2:
        out["unsupported"]["p2p_bandwidth_gbps"] = "needs two or more GPUs"
    out["p2p_bandwidth_gbps"] = tuple(peers)
    return out


CALIBRATION_N = 256  # small enough to run in milliseconds even where a dtype has no fast kernel


def _fitting_matmul_n(device: _Device, dtype: Dtype, run: _Run, deadline: float) -> int | str:
    """The largest n, doubling from a small one up to the asked size, whose runs fit the phase.

    Some dtypes have no fast kernel on some hardware (PyTorch's FP16 matmul on a
    CPU without AVX512-FP16 runs ~1000x slower than BF16); an 8192 run there
    would take hours. Each step times one run and predicts the next size by
    n^3; small sizes fit in cache and flatter the prediction, so it steps up
    by doubling rather than jumping straight to the asked size.
    """
    target = run.sizes.matmul_n
    n = min(target, CALIBRATION_N)
    op = device.matmul(dtype, n)
    if isinstance(op, str) or n == target:
        return op if isinstance(op, str) else n
    op()  # the first call pays for kernel selection and allocation
    seconds = op()
    runs = run.sizes.warmup_runs + 1  # the least a phase must fit
    while n < target:
        bigger = min(2 * n, target)
        allowed = max(0.0, deadline - run.clock()) / runs
        if seconds * (bigger / n) ** 3 > allowed:
            break
        step = device.matmul(dtype, bigger)
        assert not isinstance(step, str)  # supported at n, so supported at 2n
        n, seconds = bigger, step()
    return n


def best_backend() -> Backend:
    """The backend :func:`probe` picks when none is forced (imports torch when installed)."""
    if importlib.util.find_spec("torch") is None:
        return Backend.NUMPY
    torch: Any = importlib.import_module("torch")
    return Backend.TORCH_CUDA if torch.cuda.is_available() else Backend.TORCH_CPU


def _open_device(backend: Backend | None, clock: Clock) -> _Device:
    has_torch = importlib.util.find_spec("torch") is not None
    if backend is Backend.NUMPY or (backend is None and not has_torch):
        return _NumpyDevice(clock)
    if not has_torch:
        raise ConfigError(f"backend {backend} needs PyTorch: pip install 'spothop[torch]'")
    torch: Any = importlib.import_module("torch")
    cuda = bool(torch.cuda.is_available())
    if backend is Backend.TORCH_CUDA and not cuda:
        raise ConfigError("backend torch-cuda needs a CUDA GPU; torch.cuda.is_available() is False")
    if backend is Backend.TORCH_CPU or not cuda:
        return _TorchDevice(torch, clock, cuda=False)
    return _TorchDevice(torch, clock, cuda=True)


# -- NumPy on the CPU --------------------------------------------------------------

NUMPY_NO_BF16 = "NumPy has no bfloat16 type"
NUMPY_NO_FP16 = (
    "NumPy's float16 matmul has no BLAS kernel (it runs in software), so a figure would mislead"
)
NO_GPU = "no GPU: host-to-device needs one"


class _NumpyDevice:
    backend = Backend.NUMPY
    gpu_count = 0

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.name = f"CPU ({_cpu_name()}), NumPy {np.__version__}"

    def matmul(self, dtype: Dtype, n: int) -> RunOnce | str:
        if dtype is Dtype.BF16:
            return NUMPY_NO_BF16
        if dtype is Dtype.FP16:
            return NUMPY_NO_FP16
        rng = np.random.default_rng(0)
        a, b = (
            rng.standard_normal((n, n), dtype=np.float32),
            rng.standard_normal((n, n), dtype=np.float32),
        )
        c = np.empty((n, n), dtype=np.float32)
        return self._timed(lambda: np.matmul(a, b, out=c))

    def copy(self, nbytes: int) -> RunOnce:
        src, dst = np.ones(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
        return self._timed(lambda: np.copyto(dst, src))

    def host_to_device(self, nbytes: int) -> RunOnce | str:
        return NO_GPU

    def peer_copy(self, src: int, dst: int, nbytes: int) -> RunOnce:
        raise AssertionError("a CPU has no peers")  # _measure_all never asks: gpu_count is 0

    def _timed(self, op: Callable[[], object]) -> RunOnce:
        def once() -> float:
            t0 = self._clock()
            op()
            return self._clock() - t0

        return once


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


# -- PyTorch on CUDA or the CPU ------------------------------------------------------

_TORCH_DTYPES = {Dtype.BF16: "bfloat16", Dtype.FP16: "float16", Dtype.FP32: "float32"}


class _TorchDevice:
    def __init__(self, torch: Any, clock: Clock, cuda: bool) -> None:
        self._torch, self._clock, self._cuda = torch, clock, cuda
        self.backend = Backend.TORCH_CUDA if cuda else Backend.TORCH_CPU
        self.gpu_count = int(torch.cuda.device_count()) if cuda else 0
        where = torch.cuda.get_device_name(0) if cuda else f"CPU ({_cpu_name()})"
        self.name = f"{where}, PyTorch {torch.__version__}"
        self._dev = torch.device("cuda:0" if cuda else "cpu")
        if cuda:
            # Measure the matmul as asked: TF32 would make "FP32" a tensor-core figure.
            torch.backends.cuda.matmul.allow_tf32 = False

    def matmul(self, dtype: Dtype, n: int) -> RunOnce | str:
        torch = self._torch
        if self._cuda and dtype is Dtype.BF16 and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 support"
        kind = getattr(torch, _TORCH_DTYPES[dtype])
        gen = torch.Generator(device=self._dev).manual_seed(0)
        a = torch.randn((n, n), dtype=kind, device=self._dev, generator=gen)
        b = torch.randn((n, n), dtype=kind, device=self._dev, generator=gen)
        c = torch.empty((n, n), dtype=kind, device=self._dev)
        return self._timed(lambda: torch.matmul(a, b, out=c))

    def copy(self, nbytes: int) -> RunOnce:
        torch = self._torch
        src = torch.ones(nbytes, dtype=torch.uint8, device=self._dev)
        dst = torch.empty_like(src)
        return self._timed(lambda: dst.copy_(src))

    def host_to_device(self, nbytes: int) -> RunOnce | str:
        if not self._cuda:
            return NO_GPU
        torch = self._torch
        src = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
        dst = torch.empty(nbytes, dtype=torch.uint8, device=self._dev)
        return self._timed(lambda: dst.copy_(src, non_blocking=True))

    def peer_copy(self, src: int, dst: int, nbytes: int) -> RunOnce:
        torch = self._torch
        a = torch.ones(nbytes, dtype=torch.uint8, device=f"cuda:{src}")
        b = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{dst}")

        def once() -> float:
            # Events live on one device; a cross-device copy is timed on the host
            # clock between two synchronisations instead (µs against ms copies).
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
            t0 = self._clock()
            b.copy_(a)
            torch.cuda.synchronize(src)
            torch.cuda.synchronize(dst)
            return self._clock() - t0

        return once

    def _timed(self, op: Callable[[], object]) -> RunOnce:
        if not self._cuda:

            def on_cpu() -> float:
                t0 = self._clock()
                op()
                return self._clock() - t0

            return on_cpu
        return self._cuda_timed(op)

    def _cuda_timed(self, op: Callable[[], object]) -> RunOnce:
        torch = self._torch

        def on_gpu() -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            op()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1000.0  # elapsed_time is in ms

        return on_gpu
