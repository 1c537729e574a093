"""``spothop probe``: measure this machine's TFLOPS and bandwidths, optionally record them."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.text import Text

from spothop.bounds import Bound
from spothop.cli.output import console, err_console, note, print_json, table
from spothop.errors import ConfigError
from spothop.resources.measured import measured_path, measured_tflops, record_probe
from spothop.resources.probe import (
    DEFAULT_BUDGET_S,
    Backend,
    Dtype,
    ProbeResult,
    best_backend,
    probe,
)

PROBE_BUDGET_S = Bound(
    0, 3600, "s", low_open=True
)  # the probe is a minute; an hour-long one is a typo


def probe_command(
    as_json: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
    budget_s: Annotated[
        float,
        typer.Option(
            "--budget-s",
            help="total seconds the probe may take",
            callback=PROBE_BUDGET_S.option_callback("--budget-s"),
        ),
    ] = DEFAULT_BUDGET_S,
    record: Annotated[
        str | None,
        typer.Option(
            "--record",
            metavar="PROVIDER/INSTANCE_TYPE",
            help="store the result for this instance type",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend", help="torch-cuda, torch-cpu or numpy (default: the best available)"
        ),
    ] = None,
    if_unmeasured: Annotated[
        bool,
        typer.Option(
            "--if-unmeasured",
            help="with --record: do nothing if that instance type has a figure already",
        ),
    ] = False,
) -> None:
    """Measure dense matmul TFLOPS (BF16/FP16/FP32) and memory, host-to-device and GPU-to-GPU bandwidth.

    The agent runs ``--record CLOUD/TYPE --if-unmeasured`` at an instance's
    first boot, so each instance type is probed once and cached.
    """
    target = _parse_record(record) if record else None
    if if_unmeasured and not target:
        raise ConfigError("--if-unmeasured only makes sense with --record PROVIDER/INSTANCE_TYPE")
    if target and if_unmeasured and measured_tflops(*target) is not None:
        err_console.print(
            f"{target[0]}/{target[1]} is measured already ({measured_path()}); not probing",
            highlight=False,
        )
        return
    chosen = _parse_backend(backend) if backend else None
    if target and (chosen or best_backend()) is not Backend.TORCH_CUDA:
        # Refuse before spending the budget: a CPU figure is never recorded (see record_probe).
        raise ConfigError(
            f"--record {target[0]}/{target[1]} needs a CUDA GPU (backend torch-cuda), and this probe would run on "
            f"{(chosen or best_backend()).value}; run it on the instance itself, or drop --record to just measure"
        )
    result = probe(
        budget_s=budget_s, backend=chosen, progress=lambda msg: note(f"probe: {msg}", stderr=True)
    )
    if target:
        record_probe(*target, result)
        err_console.print(
            f"recorded for {target[0]}/{target[1]} in {measured_path()}", highlight=False
        )
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    console.print(
        Text.assemble(
            (result.device_name, "bold"),
            f" ({result.backend.value}, {result.gpu_count} GPU(s)); "
            f"{result.duration_s:.1f} s of a {result.budget_s:g} s budget",
        )
    )
    console.print(
        table(
            None,
            ["figure", "value", "unit", "timed runs", "note"],
            _rows(result),
            right=["value", "timed runs"],
        )
    )


def _parse_record(value: str) -> tuple[str, str]:
    provider, _, instance_type = value.partition("/")
    if not provider or not instance_type:
        raise ConfigError(
            f"--record expects PROVIDER/INSTANCE_TYPE, as `spothop offers` names them (provider, then the instance type); got {value!r}"
        )
    # Catalogs spell providers in lower case ("aws"); instance types stay as the cloud spells them.
    return provider.strip().lower(), instance_type.strip()


def _parse_backend(value: str) -> Backend:
    try:
        return Backend(value)
    except ValueError:
        raise ConfigError(
            f"--backend must be one of {', '.join(b.value for b in Backend)}; got {value!r}"
        ) from None


def _rows(result: ProbeResult) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for dtype in Dtype:
        key = f"{dtype.value}_tflops"
        note = result.unsupported.get(key) or (
            f"n={result.matmul_n[key]}" if key in result.matmul_n else None
        )
        rows.append(
            [
                f"{dtype.value.upper()} dense matmul",
                _tflops(result.tflops(dtype)),
                "TFLOPS",
                result.samples.get(key),
                note,
            ]
        )
    for key, label, value in (
        ("memory_bandwidth_gbps", "memory copy (read+write)", result.memory_bandwidth_gbps),
        ("h2d_bandwidth_gbps", "host to device", result.h2d_bandwidth_gbps),
    ):
        rows.append(
            [label, _fmt(value, 1), "GB/s", result.samples.get(key), result.unsupported.get(key)]
        )
    for peer in result.p2p_bandwidth_gbps:
        rows.append(
            [
                f"GPU{peer.src_gpu} → GPU{peer.dst_gpu}",
                _fmt(peer.bandwidth_gbps, 1),
                "GB/s",
                peer.samples,
                None,
            ]
        )
    if "p2p_bandwidth_gbps" in result.unsupported:
        rows.append(["GPU to GPU", None, "GB/s", None, result.unsupported["p2p_bandwidth_gbps"]])
    return rows


def _tflops(value: float | None) -> str | None:
    # Three significant digits: a CPU's 0.00102 and an H200's 712 both read right.
    return None if value is None else f"{value:.3g}"


def _fmt(value: float | None, digits: int) -> str | None:
    return None if value is None else f"{value:,.{digits}f}"


def register(app: typer.Typer) -> None:
    app.command("probe")(probe_command)
