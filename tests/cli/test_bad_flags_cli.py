"""Bad flags at the command line: one clear line, exit 2, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["offers", "--limit", "0"], "--limit must be at least 1"),
        (["offers", "--min-tflops", "-1"], "--min-tflops must be between 0 and"),
        (["offers", "--provider", "lamda"], "did you mean 'lambda'"),
        (
            ["catalog", "diff", "--min-change", "-5", "builtin", "builtin"],
            "--min-change must be zero or more",
        ),
        (["probe", "--if-unmeasured"], "--if-unmeasured only makes sense with --record"),
    ],
)
def test_bad_flags_give_one_line(cli: Callable[..., Any], argv: list[str], message: str) -> None:
    result = cli(*argv)
    assert result.code == 2
    assert result.err.startswith("error:") and message in " ".join(result.err.split())
    assert "Traceback" not in result.err


def test_offers_provider_is_case_insensitive(cli: Callable[..., Any]) -> None:
    result = cli("offers", "--provider", "AWS", "--gpu", "A100", "--limit", "2", "--json")
    assert result.code == 0
    assert {o["provider"] for o in result.json()} == {"aws"}


def test_offers_limit_keeps_the_cheapest(cli: Callable[..., Any]) -> None:
    every = cli("offers", "--gpu", "H100", "--count", "8", "--json").json()
    top = cli("offers", "--gpu", "H100", "--count", "8", "--limit", "3", "--json").json()
    assert [o["usd_per_gpu_hour"] for o in top] == [o["usd_per_gpu_hour"] for o in every[:3]]


def test_import_of_a_binary_file_is_an_error_not_a_traceback(
    cli: Callable[..., Any], tmp_path: Path
) -> None:
    junk = tmp_path / "vms.csv"
    junk.write_bytes(b"\xff\xfe\x00binary")
    result = cli("catalog", "import", "--dry-run", str(junk))
    assert result.code == 2 and "not a text file" in result.err and "Traceback" not in result.err


def test_probe_record_without_a_gpu_is_refused_before_probing(cli: Callable[..., Any]) -> None:
    result = cli("probe", "--record", "AWS/p5.48xlarge", "--backend", "numpy")
    assert result.code == 2
    assert "needs a CUDA GPU" in result.err
    assert (
        "probe:" not in result.err
    )  # no measurement was started: the budget is not spent for nothing
