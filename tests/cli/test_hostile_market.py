"""Hostile input to ``spothop market``: bad price files, dates and stores are one clear line with their exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from spothop.errors import ConfigError, NotFoundError
from tests.cli.hostile import MARKUP_NAME, Row, hostile_files, rows, run_row

HEADER = "Timestamp,AvailabilityZone,InstanceType,ProductDescription,SpotPrice\n"
GOOD = "2020-01-01T00:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,0.918\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    found = hostile_files(
        tmp_path / "in",
        ".csv",
        valid=HEADER + GOOD,
        truncated=HEADER + GOOD + "2020-01-01T01:00",
        nan=HEADER + GOOD + "2020-01-01T01:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,nan\n"
        "2020-01-01T02:00:00.000Z,us-east-1a,p3.2xlarge,Linux/UNIX,inf\n",
    )
    extra = {
        # issue V: an absurd magnitude is refused like NaN, naming the bound
        "absurd_price": HEADER + GOOD.replace("0.918", "1e300"),
        # issue V2: a price dated 9999 is refused at import, so `market prices` stays fast
        "year_9999": HEADER + GOOD.replace("2020-01-01", "9999-12-31"),
    }
    for name, text in extra.items():
        (tmp_path / "in" / f"{name}.csv").write_text(text)
    (tmp_path / "home-file").write_text("")
    return {
        **found,
        **{k: str(tmp_path / "in" / f"{k}.csv") for k in extra},
        "home_file": str(tmp_path / "home-file"),
    }


UNREACHABLE_DB = "postgresql://postgres@127.0.0.1:1/none"

TABLE = rows(
    Row("import-missing", ["market", "import", "{missing}"], 3, NotFoundError, "missing.csv"),
    Row("import-empty", ["market", "import", "{empty}"], 2, ConfigError, "empty.csv"),
    Row("import-binary", ["market", "import", "{binary}"], 2, ConfigError, "binary.csv"),
    Row("import-truncated", ["market", "import", "{truncated}"], 5, None, "truncated.csv"),
    Row("import-folder", ["market", "import", "{dir}"], 2, ConfigError, "folder.csv"),
    Row("import-huge", ["market", "import", "{huge}"], 2, ConfigError, "huge.csv"),
    Row("import-nan-and-inf", ["market", "import", "{nan}"], 5, None, "nan.csv"),
    Row("import-absurd-price", ["market", "import", "{absurd_price}"], 1, None, "10000 USD per"),
    Row("import-year-9999", ["market", "import", "{year_9999}"], 1, None, "between 2006 and 2100"),
    Row("import-unicode-name", ["market", "import", "{unicode}"], 0, None, "ünïcødé-名前"),
    Row("import-markup-name", ["market", "import", "--json", "{markup}"], 0, None, MARKUP_NAME),
    Row(
        "import-bad-format",
        ["market", "import", "--format", "[/x]", "{valid}"],
        2,
        ConfigError,
        "[/x]",
    ),
    Row(
        "prices-bad-since",
        ["market", "prices", "--since", "[red]yesterday"],
        2,
        ConfigError,
        "[red]yesterday",
    ),
    Row("prices-far-since", ["market", "prices", "--since", "9999-01-01"], 2, ConfigError, "2100"),
    Row(
        "prices-ancient-since",
        ["market", "prices", "--since", "0001-01-01"],
        2,
        ConfigError,
        "2006",
    ),
    Row("prices-huge-span", ["market", "prices", "--since", "99999999w"], 2, ConfigError),
    Row("prices-unknown-gpu", ["market", "prices", "--gpu", "[/x]"], 2, ConfigError, "[/x]"),
    Row(
        "prices-unreachable-db",
        ["market", "prices"],
        4,
        None,
        "the database did not answer",
        env={"SPOTHOP_DATABASE_URL": UNREACHABLE_DB},
    ),
    Row(
        "reliability-missing-traces",
        ["market", "reliability", "--traces", "{missing}"],
        3,
        NotFoundError,
        "missing.csv",
    ),
    Row(
        "reliability-bad-window",
        ["market", "reliability", "--window", "forever"],
        2,
        ConfigError,
        "--window",
    ),
    Row(
        "home-is-a-file",
        ["market", "prices"],
        2,
        ConfigError,
        "is a file",
        env={"SPOTHOP_HOME": "{home_file}"},
    ),
)


@pytest.mark.parametrize("row", TABLE)
def test_market_refuses_hostile_input_clearly(
    row: Row,
    files: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_row(row, files, capsys, monkeypatch)
