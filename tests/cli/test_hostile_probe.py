"""Hostile input to ``spothop probe``: one clear line with its exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import ConfigError, ValueOutOfRange
from tests.cli.hostile import Row, rows, run_row


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("not a folder")
    return {"file": str(tmp_path / "file")}


TABLE = rows(
    Row("probe-budget-nan", ["probe", "--budget-s", "nan"], 2, ValueOutOfRange, "--budget-s"),
    Row("probe-budget-negative", ["probe", "--budget-s", "-1"], 2, ConfigError, "--budget-s"),
    Row("probe-budget-huge", ["probe", "--budget-s", "1e12"], 2, ConfigError, "--budget-s"),
    Row(
        "probe-record-no-slash", ["probe", "--record", "aws", "--backend", "numpy"], 2, ConfigError
    ),
    Row(
        "probe-record-path",
        ["probe", "--record", "../../x/y", "--backend", "numpy"],
        2,
        ConfigError,
    ),
    Row("probe-backend-unknown", ["probe", "--backend", "[red]tpu"], 2, ConfigError, "[red]tpu"),
)


@pytest.mark.parametrize("row", TABLE)
def test_probe_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
