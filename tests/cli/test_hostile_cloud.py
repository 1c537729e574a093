"""Hostile input to ``spothop cloud``: bad world files and flags are one clear line with their exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import (
    ConfigError,
    InstanceNotFound,
    InvalidRequest,
    NotFoundError,
    ValueOutOfRange,
)
from tests.cli.hostile import MARKUP_NAME, Row, hostile_files, rows, run_row

WORLD = """seed: 1
speed: 10
clouds:
  - name: aws-sim
    protocol: aws
    catalog: aws
    notice_lead_time_s: 120
    locations: [us-east-1a]
    instance_types: [g5.xlarge]
    market:
      synthetic: {mean_time_between_preemptions_s: 21600, mean_outage_s: 1800}
"""


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    found = hostile_files(
        tmp_path / "in",
        ".yaml",
        valid=WORLD,
        truncated=WORLD[:60],
        nan=WORLD.replace("speed: 10", "speed: .nan"),
    )
    # issue V: an absurd speed once re-anchored the shared clock from a display command
    (tmp_path / "in" / "absurd.yaml").write_text(WORLD.replace("speed: 10", "speed: 1e12"))
    (tmp_path / "home-file").write_text("")
    return {
        **found,
        "absurd": str(tmp_path / "in" / "absurd.yaml"),
        "home_file": str(tmp_path / "home-file"),
    }


TABLE = rows(
    Row(
        "world-missing",
        ["cloud", "world", "--world", "{missing}"],
        3,
        NotFoundError,
        "missing.yaml",
    ),
    Row("world-empty", ["cloud", "world", "--world", "{empty}"], 2, ConfigError, "empty.yaml"),
    Row("world-binary", ["cloud", "world", "--world", "{binary}"], 2, ConfigError, "binary.yaml"),
    Row(
        "world-truncated",
        ["cloud", "world", "--world", "{truncated}"],
        2,
        ConfigError,
        "truncated.yaml",
    ),
    Row("world-folder", ["cloud", "world", "--world", "{dir}"], 2, ConfigError, "folder.yaml"),
    Row("world-huge", ["cloud", "world", "--world", "{huge}"], 2, ConfigError, "huge.yaml"),
    Row(
        "world-nan-speed",
        ["cloud", "world", "--world", "{nan}"],
        2,
        ConfigError,
        "key speed: speed must be",
    ),
    Row(
        "world-absurd-speed",
        ["cloud", "world", "--world", "{absurd}"],
        2,
        ConfigError,
        "key speed: speed must be greater than 0 and at most 100000",
    ),
    Row("world-unicode-name", ["cloud", "world", "--world", "{unicode}"], 0, None, "ünïcødé-名前"),
    Row("world-markup-name", ["cloud", "world", "--world", "{markup}"], 0, None, MARKUP_NAME),
    Row(
        "launch-unknown-cloud",
        ["cloud", "launch", "[/x]-sim", "g5.xlarge", "us-east-1a"],
        2,
        ConfigError,
        "[/x]-sim",
    ),
    Row(
        "launch-unknown-type",
        ["cloud", "launch", "aws-sim", "[red]big", "us-east-1a"],
        2,
        InvalidRequest,
        "[red]big",
    ),
    Row(
        "launch-max-price-nan",
        ["cloud", "launch", "aws-sim", "g5.xlarge", "us-east-1a", "--max-price", "nan"],
        2,
        ValueOutOfRange,
        "--max-price",
    ),
    Row("preempt-unknown", ["cloud", "preempt", "i-0[/x]"], 3, InstanceNotFound, "i-0[/x]"),
    Row(
        "preempt-lead-nan",
        ["cloud", "preempt", "i-0abc", "--lead-time", "nan"],
        2,
        ValueOutOfRange,
        "--lead-time",
    ),
    Row(
        "preempt-lead-huge",
        ["cloud", "preempt", "i-0abc", "--lead-time", "1e30"],
        2,
        ValueOutOfRange,
    ),
    Row(
        "preempt-lead-negative",
        ["cloud", "preempt", "i-0abc", "--lead-time=-5"],
        2,
        ValueOutOfRange,
        "between 0 and 86400 s",
    ),
    Row(
        "preempt-advance-inf",
        ["cloud", "preempt", "i-0abc", "--advance", "inf"],
        2,
        ValueOutOfRange,
        "--advance",
    ),
    Row(
        "maintenance-in-nan",
        ["cloud", "maintenance", "i-0abc", "--code", "x", "--in", "nan"],
        2,
        ValueOutOfRange,
    ),
    Row("terminate-unknown", ["cloud", "terminate", "i-0nothing"], 0),  # a no-op, as clouds do
    Row(
        "ls-home-is-a-file",
        ["cloud", "ls"],
        2,
        ConfigError,
        "is a file",
        env={"SPOTHOP_HOME": "{home_file}"},
    ),
    Row(
        "world-home-is-a-file",
        ["cloud", "world"],
        2,
        ConfigError,
        "is a file",
        env={"SPOTHOP_HOME": "{home_file}"},
    ),
)


@pytest.mark.parametrize("row", TABLE)
def test_cloud_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
