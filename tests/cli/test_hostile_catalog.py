"""Hostile input to ``spothop catalog``: every bad file is reported with its exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import CatalogError, ConfigError, NotFoundError
from tests.cli.hostile import MARKUP_NAME, Row, hostile_files, rows, run_row

HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region\n"
GOOD = "gpu_1x_a10,A10,1,30,200,0.75,us-east-1\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    found = hostile_files(
        tmp_path / "in",
        ".csv",
        valid=HEADER + GOOD,
        truncated=HEADER + GOOD + "gpu_1x_a100,A10",
        nan=HEADER + GOOD + "gpu_1x_a100,A100,1,30,200,nan,us-east-1\n"
        "gpu_8x_a100,A100,inf,30,200,1.5,us-east-1\n",
    )
    (tmp_path / "home-file").write_text("")
    return {**found, "home_file": str(tmp_path / "home-file")}


TABLE = rows(
    Row(
        "import-missing",
        ["catalog", "import", "--dry-run", "{missing}"],
        3,
        NotFoundError,
        "missing.csv",
    ),
    Row("import-empty", ["catalog", "import", "--dry-run", "{empty}"], 2, CatalogError),
    Row(
        "import-binary",
        ["catalog", "import", "--dry-run", "{binary}"],
        2,
        CatalogError,
        "not a text file",
    ),
    Row(
        "import-truncated-row",
        ["catalog", "import", "--dry-run", "--provider", "lambda", "{truncated}"],
        5,
        None,
        "1 refused",
    ),
    Row(
        "import-folder-without-vms",
        ["catalog", "import", "--dry-run", "{dir}"],
        2,
        CatalogError,
        "no vms.csv",
    ),
    Row("import-huge", ["catalog", "import", "--dry-run", "{huge}"], 2, CatalogError),
    Row(
        "import-nan-and-inf",
        ["catalog", "import", "--dry-run", "--provider", "lambda", "{nan}"],
        5,
        None,
        "2 refused",
    ),
    Row(
        "import-unicode-name",
        ["catalog", "import", "--dry-run", "--provider", "lambda", "{unicode}"],
        0,
        None,
        "ünïcødé-名前",
    ),
    Row(
        "import-markup-name",
        ["catalog", "import", "--dry-run", "--provider", "lambda", "{markup}"],
        0,
        None,
        MARKUP_NAME,
    ),
    Row(
        "import-provider-path",
        ["catalog", "import", "--provider", "../../x", "{valid}"],
        2,
        ConfigError,
        "plain name",
    ),
    Row(
        "import-provider-markup",
        ["catalog", "import", "--provider", "[red]x", "{valid}"],
        2,
        ConfigError,
        "[red]x",
    ),
    Row(
        "import-bad-format",
        ["catalog", "import", "--format", "[/x]", "{valid}"],
        2,
        ConfigError,
        "[/x]",
    ),
    Row(
        "import-bad-date",
        ["catalog", "import", "--price-date", "9999-99-99", "{valid}"],
        2,
        ConfigError,
    ),
    Row(
        "import-far-date",
        [
            "catalog",
            "import",
            "--dry-run",
            "--provider",
            "lambda",
            "--price-date",
            "9999-01-01",
            "{valid}",
        ],
        2,
        ConfigError,
        "2100",
    ),
    Row(
        "import-home-is-a-file",
        ["catalog", "import", "--provider", "lambda", "{valid}"],
        2,
        ConfigError,
        "is a file",
        env={"SPOTHOP_HOME": "{home_file}"},
    ),
    Row(
        "diff-missing",
        ["catalog", "diff", "{missing}", "builtin"],
        2,
        CatalogError,
        "does not exist",
    ),
    Row("diff-binary", ["catalog", "diff", "{binary}", "builtin"], 2, CatalogError),
    Row(
        "diff-nan-change",
        ["catalog", "diff", "--min-change", "nan", "builtin", "builtin"],
        2,
        ConfigError,
    ),
    Row(
        "summary-home-is-a-file",
        ["catalog", "summary"],
        2,
        ConfigError,
        "is a file",
        env={"SPOTHOP_HOME": "{home_file}"},
    ),
)


@pytest.mark.parametrize("row", TABLE)
def test_catalog_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
