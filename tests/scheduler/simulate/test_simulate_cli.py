"""``spothop simulate``: the issue's command line, its JSON, and bad input named by flag or file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Result
from tests.conftest import shared_path

Cli = Callable[..., Result]
PUBLISHED = [
    "--task-hours",
    "48",
    "--deadline-hours",
    "52",
    "--restart-overhead-hours",
    "0.05",
    "--spot-price",
    "0.9731",
    "--on-demand-price",
    "3.06",
]


def _trace(folder: Path, name: str, data: list[int], **extra: object) -> Path:
    path = folder / name
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data, **extra}))
    return path


def test_the_issue_command_prints_average_cost_deadlines_and_runs(cli: Cli) -> None:
    folder = shared_path("traces", "cant-be-late", "availability-1node-aws-2022-10-26")
    result = cli(
        "simulate",
        "--policy",
        "uniform-progress",
        "--runs-dir",
        str(folder),
        *PUBLISHED,
        "--windows",
        "2",
        "--seed",
        "3",
        "--json",
    )
    assert result.code == 0, result.err
    out = result.json()
    assert len(out["runs"]) == 2 * 8
    assert out["deadlines_met_fraction"] == 1.0
    assert out["average_cost"] == pytest.approx(sum(r["cost"] for r in out["runs"]) / 16)
    assert {"finish_hours", "deadline_met", "preemptions", "spot_hours", "on_demand_hours"} <= set(
        out["runs"][0]
    )


def test_on_demand_from_the_first_tick_costs_the_published_figure(cli: Cli, tmp_path: Path) -> None:
    trace = _trace(tmp_path, "z.json", [1] * 400)
    result = cli("simulate", "--policy", "on-demand", "--trace", str(trace), "--json")
    assert result.code == 0, result.err
    assert round(result.json()["average_cost"], 2) == 147.39


def test_several_traces_are_zones_and_prices_per_tick_are_used(cli: Cli, tmp_path: Path) -> None:
    a = _trace(tmp_path, "a.json", [0] * 400, prices=[0.5] * 400)
    b = _trace(tmp_path, "b.json", [0] * 400)
    result = cli("simulate", "--policy", "greedy", "--trace", str(a), "--trace", str(b), "--json")
    assert result.code == 0, result.err
    run = result.json()["runs"][0]
    assert run["label"] == "a+b@0"
    assert run["cost"] == pytest.approx(289 * 0.5 / 6)  # the cheaper zone, 289 ticks


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--deadline-hours", "40"], "--deadline-hours"),
        (["--restart-overhead-hours", "-0.1"], "--restart-overhead-hours"),
        (["--spot-price", "-1"], "--spot-price"),
        (["--on-demand-price", "0"], "--on-demand-price"),
        (["--policy", "fastest"], "--policy"),
        (["--windows", "0"], "--windows"),
    ],
)
def test_bad_flags_are_named(cli: Cli, tmp_path: Path, args: list[str], named: str) -> None:
    trace = _trace(tmp_path, "z.json", [0] * 400)
    result = cli("simulate", "--trace", str(trace), *args)
    assert result.code == 2
    assert named in result.err
    assert "Traceback" not in result.err


def test_a_trace_of_the_wrong_shape_is_named(cli: Cli, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": "01"}))
    short = _trace(tmp_path, "short.json", [0] * 10)
    other_gap = tmp_path / "slow.json"
    other_gap.write_text(json.dumps({"metadata": {"gap_seconds": 300}, "data": [0] * 800}))
    fine = _trace(tmp_path, "fine.json", [0] * 400)
    for args, named in (
        (["--trace", str(bad)], "bad.json"),
        (["--trace", str(short)], "short.json"),
        (["--trace", str(fine), "--trace", str(other_gap)], "slow.json"),
        (["--trace", str(tmp_path / "missing.json")], "missing.json"),
    ):
        result = cli("simulate", *args)
        assert result.code in (2, 3), result.err
        assert named in result.err


def test_neither_or_both_sources_is_refused(cli: Cli, tmp_path: Path) -> None:
    trace = _trace(tmp_path, "z.json", [0] * 400)
    assert cli("simulate").code == 2
    assert cli("simulate", "--trace", str(trace), "--runs-dir", str(tmp_path)).code == 2
