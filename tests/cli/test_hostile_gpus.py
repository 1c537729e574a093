"""Hostile input to ``spothop gpus``: one clear line with its exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.hostile import Row, rows, run_row


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "file").write_text("not a folder")
    return {"file": str(tmp_path / "file")}


TABLE = rows(
    Row("gpus-extra-argument", ["gpus", "extra"], 2),
    Row("gpus-json", ["gpus", "--json"], 0),
    Row("gpus-unknown-option", ["gpus", "--gpu", "[/x]"], 2),
    Row(
        "gpus-home-is-a-file", ["gpus"], 0, env={"SPOTHOP_HOME": "{file}"}
    ),  # built-in figures only: nothing to read there
)


@pytest.mark.parametrize("row", TABLE)
def test_gpus_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
