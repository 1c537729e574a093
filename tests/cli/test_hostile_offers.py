"""Hostile input to ``spothop offers``, ``spothop gpus`` and ``spothop probe``: one clear line, its exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import ConfigError, UnknownGpuError, ValueOutOfRange
from tests.cli.hostile import Row, rows, run_row


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("not a folder")
    return {"file": str(tmp_path / "file")}


OFFERS = rows(
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
    Row("home-is-a-file", ["offers", "--gpu", "H100"], 2, ConfigError, "is a file", env={"SPOTHOP_HOME": "{file}"}),
    Row("gpus-extra-argument", ["gpus", "extra"], 2),
    Row("gpus-json", ["gpus", "--json"], 0),
    Row("gpus-home-is-a-file", ["gpus"], 0, env={"SPOTHOP_HOME": "{file}"}),  # built-in figures only: nothing to read there
    Row("probe-budget-nan", ["probe", "--budget-s", "nan"], 2, ValueOutOfRange, "--budget-s"),
    Row("probe-budget-negative", ["probe", "--budget-s", "-1"], 2, ConfigError, "--budget-s"),
    Row("probe-budget-huge", ["probe", "--budget-s", "1e12"], 2, ConfigError, "--budget-s"),
    Row("probe-record-no-slash", ["probe", "--record", "aws", "--backend", "numpy"], 2, ConfigError),
    Row("probe-record-path", ["probe", "--record", "../../x/y", "--backend", "numpy"], 2, ConfigError),
    Row("probe-backend-unknown", ["probe", "--backend", "[red]tpu"], 2, ConfigError, "[red]tpu"),
)


@pytest.mark.parametrize("row", OFFERS)
def test_offers_gpus_and_probe_refuse_hostile_input_clearly(row: Row, files: dict[str, str],
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run_row(row, files, capsys, monkeypatch)
