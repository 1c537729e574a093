"""Hostile input to ``spothop offers``: one clear line with its exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import ConfigError, UnknownGpuError, ValueOutOfRange
from tests.cli.hostile import Row, rows, run_row


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("not a folder")
    return {"file": str(tmp_path / "file")}


TABLE = rows(
    Row("max-price-nan", ["offers", "--max-price", "nan"], 2, ValueOutOfRange, "--max-price"),
    Row("max-price-inf", ["offers", "--max-price", "inf"], 2, ValueOutOfRange, "--max-price"),
    Row("max-price-huge", ["offers", "--max-price", "1e300"], 2, ValueOutOfRange),
    Row("count-huge", ["offers", "--count", "1000000000"], 2, ValueOutOfRange, "--count"),
    Row("count-not-a-number", ["offers", "--count", "many"], 2, None, "--count"),
    Row("memory-negative", ["offers", "--min-gpu-memory", "-1"], 2, ValueOutOfRange),
    Row("tflops-nan", ["offers", "--min-tflops", "nan"], 2, ValueOutOfRange),
    Row("limit-zero", ["offers", "--limit", "0"], 2, ConfigError),
    Row("gpu-markup", ["offers", "--gpu", "[/x][red]H100"], 2, UnknownGpuError, "'[/x][red]H100'"),
    Row("gpu-unicode", ["offers", "--gpu", "Н100"], 2, UnknownGpuError, "Н100"),
    Row("gpu-empty", ["offers", "--gpu", ""], 2, ConfigError),
    Row("provider-markup", ["offers", "--provider", "[bold]aws"], 2, ConfigError, "[bold]aws"),
    Row("region-unknown", ["offers", "--region", "mars-1"], 2, ConfigError, "mars-1"),
    Row("interconnect-unknown", ["offers", "--interconnect", "[/x]"], 2, ConfigError, "[/x]"),
    Row("sort-unknown", ["offers", "--sort", "vibes"], 2),
    Row(
        "home-is-a-file",
        ["offers", "--gpu", "H100"],
        2,
        ConfigError,
        "is a file",
        env={"SPOTHOP_HOME": "{file}"},
    ),
)


@pytest.mark.parametrize("row", TABLE)
def test_offers_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
