"""Hostile input to ``spothop topo``: every bad file is one clear line with its exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import NotFoundError, TopologyParseError
from tests.cli.hostile import MARKUP_NAME, Row, hostile_files, rows, run_row
from tests.conftest import shared_path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    valid = shared_path("nvidia-smi", "topo", "8x_rtx4090_pcie_topo.txt").read_text()
    return hostile_files(
        tmp_path / "in",
        ".txt",
        valid=valid,
        truncated=valid[: len(valid) // 3],
        nan="\tGPU0\tGPU1\nGPU0\t X \tNaN\nGPU1\tinf\t X \n",
    )


TABLE = rows(
    Row("missing", ["topo", "parse", "{missing}"], 3, NotFoundError, "missing.txt"),
    Row("empty", ["topo", "parse", "{empty}"], 2, TopologyParseError),
    Row("binary", ["topo", "parse", "{binary}"], 2, TopologyParseError),
    Row("truncated", ["topo", "parse", "{truncated}"], 2, TopologyParseError),
    Row("directory", ["topo", "parse", "{dir}"], 2, TopologyParseError, "folder.txt"),
    Row("huge", ["topo", "parse", "{huge}"], 2, TopologyParseError),
    Row("nan", ["topo", "parse", "{nan}"], 2, TopologyParseError),
    Row("unicode-name", ["topo", "parse", "{unicode}"], 0, None, "ünïcødé-名前"),
    Row("markup-name", ["topo", "parse", "{markup}"], 0, None, MARKUP_NAME),
    Row("choose-nan", ["topo", "parse", "{valid}", "--choose", "nan"], 2, None),
    Row("choose-zero", ["topo", "parse", "{valid}", "--choose", "0"], 2),
    Row("choose-too-many", ["topo", "parse", "{valid}", "--choose", "99999999999"], 2),
    Row(
        "home-is-a-file", ["topo", "parse", "{valid}", "--json"], 0, env={"SPOTHOP_HOME": "{valid}"}
    ),
)


@pytest.mark.parametrize("row", TABLE)
def test_topo_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
