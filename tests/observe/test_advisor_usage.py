"""spothop advise --usage: the reserved baseline minimising total cost; bad rows name line and column."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from spothop.observe.usage import UsageError, best_baseline, parse_usage, plan_cost

CSV = "time,gpus\n" + "".join(
    f"{h * 3600},{g}\n" for h, g in enumerate([4, 4, 4, 4, 8, 8, 4, 4, 12, 4, 4, 4])
)


def test_baseline_is_the_cheapest_level_not_the_minimum() -> None:
    curve = parse_usage(CSV)
    advice = best_baseline(curve, reserved_price=1.0, on_demand_price=3.0)
    costs = {r: plan_cost(curve, r, 1.0, 3.0).cost_microusd for r in range(curve.peak + 1)}
    assert advice.best.cost_microusd == min(costs.values())
    assert (
        advice.best.reserved_gpus == 4
    )  # the floor is 4; above it, a level used under 1/3 of the time loses
    assert advice.best.cost_microusd < advice.all_on_demand.cost_microusd
    assert advice.best.cost_microusd < advice.all_reserved.cost_microusd
    # 12 h × 4 GPUs reserved at $1 + peaks (2 h × 4 + 1 h × 8 = 16 GPU-h) at $3
    assert advice.best.cost_microusd == (48 + 48) * 1_000_000


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("time,gpus\n0,1\n3600,many\n", "line 3, column gpus"),
        ("time,gpus\n0,1\nyesterday,2\n", "line 3, column time"),
        ("time,gpus\n0,1\n3600,-2\n", "line 3, column gpus"),
        ("time,gpus\n3600,1\n0,2\n", "line 3, column time"),
        ("when,gpus\n0,1\n", "line 1"),
    ],
)
def test_bad_row_names_line_and_column(text: str, where: str) -> None:
    with pytest.raises(UsageError, match=where):
        parse_usage(text)


def _cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(args))
    return code, out.getvalue()


def test_cli_usage_json_and_bad_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "usage.csv"
    path.write_text(CSV)
    code, out = _cli(
        "advise", "--usage", str(path), "--reserved-price", "1", "--on-demand-price", "3", "--json"
    )
    assert code == 0, out
    assert json.loads(out)["recommended"]["reserved_gpus"] == 4
    path.write_text("time,gpus\n0,1\n3600,x\n")
    code, _ = _cli(
        "advise", "--usage", str(path), "--reserved-price", "1", "--on-demand-price", "3"
    )
    assert code != 0
    assert "line 3, column gpus" in capsys.readouterr().err


def test_missing_binary_and_nul_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prices = ("--reserved-price", "1", "--on-demand-price", "3")
    assert _cli("advise", "--usage", str(tmp_path / "none.csv"), *prices)[0] == 3
    nul = tmp_path / "nul.csv"
    nul.write_bytes(b"time,gpus\n0,1\x00\n")
    assert _cli("advise", "--usage", str(nul), *prices)[0] == 2
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    assert _cli("advise", "--usage", str(binary), *prices)[0] == 2
    assert _cli("advise", "--usage", str(tmp_path), *prices)[0] == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "line 2" in err
