"""Numbers without bounds: every number advise and simulate take is bounded where it enters.

A huge hours figure, a usage row of 10^12 GPUs or a price of 1e308 is one error line naming the
flag or the row and the range (exit 2), never a hang, an overflow or a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1e-300, 1e6, 1e12, 1e300, 1e308, -1.0]),
)


def _usage(folder: Path, gpus: int) -> Path:
    path = folder / "usage.csv"
    path.write_text(
        f"time,gpus\n2024-01-01T00:00:00Z,4\n2024-01-01T01:00:00Z,{gpus}\n2024-01-01T02:00:00Z,3\n"
    )
    return path


def _trace(folder: Path) -> Path:
    path = folder / "zone.json"
    data = ([0] * 5 + [1] * 4) * 20  # 1 = unavailable
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    return path


@pytest.mark.parametrize("hours", ["1e300", "100000", "nan", "inf"])
def test_advise_refuses_work_hours_past_a_year(
    cli: Callable[..., Any], tmp_path: Path, hours: str
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: a\nrun: 'true'\n")
    result = cli("advise", str(job), "--work-h", hours)
    assert result.code == 2 and "--work-h" in result.err and "Traceback" not in result.err


def test_a_usage_row_of_a_trillion_gpus_is_refused_with_its_line(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    usage = _usage(tmp_path, 10**12)
    result = cli("advise", "--usage", str(usage), "--reserved-price", "1", "--on-demand-price", "3")
    assert result.code == 2 and "line 3" in result.err and "1,000,000" in result.err


def test_a_million_gpu_peak_is_advised_on_its_levels_only(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    usage = _usage(tmp_path, 10**6)
    result = cli(
        "advise", "--usage", str(usage), "--reserved-price", "1", "--on-demand-price", "3", "--json"
    )
    assert result.code == 0
    assert result.json()["recommended"]["reserved_gpus"] in (0, 3, 4, 10**6)


@SETTINGS
@given(reserved=NUMBERS, on_demand=NUMBERS, spot=st.one_of(st.none(), NUMBERS))
def test_advise_usage_prices_are_a_result_or_one_error_line(
    cli: Callable[..., Any], tmp_path: Path, reserved: float, on_demand: float, spot: float | None
) -> None:
    args = ["advise", "--usage", str(_usage(tmp_path, 8)), "--json"]
    args += ["--reserved-price", repr(reserved), "--on-demand-price", repr(on_demand)]
    if spot is not None:
        args += ["--spot-price", repr(spot)]
    result = cli(*args)
    assert result.code in (0, 2), result.err
    if result.code == 0:
        figures = json.dumps(result.json())
        assert "Infinity" not in figures and "NaN" not in figures
    else:
        last = result.err.strip().splitlines()[-1]
        assert last.lower().startswith("error") and "Traceback" not in result.err


@SETTINGS
@given(
    flag=st.sampled_from(
        [
            "--on-demand-price",
            "--spot-price",
            "--restart-overhead-hours",
            "--task-hours",
            "--deadline-hours",
        ]
    ),
    value=NUMBERS,
)
def test_simulate_numbers_are_a_result_or_one_error_line(
    cli: Callable[..., Any], tmp_path: Path, flag: str, value: float
) -> None:
    result = cli("simulate", "--trace", str(_trace(tmp_path)), flag, repr(value), "--json")
    assert result.code in (0, 2), result.err
    if result.code == 0:
        assert "Infinity" not in result.out and "NaN" not in result.out
    else:
        last = result.err.strip().splitlines()[-1]
        assert last.lower().startswith("error") and "Traceback" not in result.err
