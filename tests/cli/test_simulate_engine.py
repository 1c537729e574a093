"""``spothop simulate --engine controller``: the controller's decide gives the model's figures."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.cli.conftest import Result

Cli = Callable[..., Result]
SETTING = ["--task-hours", "10", "--deadline-hours", "14", "--restart-overhead-hours", "0.05"]


def _trace(folder: Path) -> Path:
    path = folder / "zone.json"
    data = ([0] * 5 + [1] * 4) * 20  # 1 = unavailable (the SIMULATION.md reading)
    path.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": data}))
    return path


def test_both_engines_agree_on_greedy_uniform_progress_and_spothop(
    cli: Cli, tmp_path: Path
) -> None:
    trace = str(_trace(tmp_path))
    for policy in ("greedy", "uniform-progress", "spothop"):
        outs = []
        for engine in ("model", "controller"):
            args = ["simulate", "--policy", policy, "--trace", trace, *SETTING, "--json"]
            result = cli(*args, "--engine", engine)
            assert result.code == 0, result.err
            outs.append(result.json()["runs"])
        assert outs[0] == outs[1], policy


def test_the_controller_engine_refuses_the_offline_oracle_and_unknown_engines(
    cli: Cli, tmp_path: Path
) -> None:
    trace = str(_trace(tmp_path))
    result = cli("simulate", "--policy", "optimal", "--trace", trace, "--engine", "controller")
    assert result.code == 2 and "--engine controller" in result.err
    result = cli("simulate", "--trace", trace, "--engine", "fast")
    assert result.code == 2 and "--engine 'fast'" in result.err
