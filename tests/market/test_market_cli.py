"""``spothop market``: import, prices (table, JSON, plot), reliability."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spothop.cli.main import main
from tests.conftest import shared_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")


def test_import_then_reimport_adds_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(
        shared_path("prices", "aws-describe-spot-price-history-raw", "us-east-2", "p3.8xlarge.json")
    )
    code, out, _ = run(capsys, "market", "import", path, "--json")
    assert code == 0 and json.loads(out)[0]["added"] == 228
    code, out, _ = run(capsys, "market", "import", path, "--json")
    report = json.loads(out)[0]
    assert (
        report["added"] == 0 and len(report["duplicates"]) == 228 and report["format"] == "aws-json"
    )


def test_prices_window_message_names_the_stored_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run(
        capsys,
        "market",
        "import",
        str(
            shared_path(
                "prices", "aws-describe-spot-price-history-raw", "us-east-2", "p3.8xlarge.json"
            )
        ),
    )
    code, out, _ = run(capsys, "market", "prices", "--gpu", "V100", "--since", "7d")
    assert code == 1 and "2019-12-22" in out and "2020-02-20" in out
    png = tmp_path / "p.png"
    code, out, _ = run(
        capsys,
        "market",
        "prices",
        "--gpu",
        "V100",
        "--since",
        "2020-02-01",
        "--json",
        "--plot",
        str(png),
    )
    rows = json.loads(out)
    assert code == 0 and {r["zone"] for r in rows} == {"us-east-2a", "us-east-2b", "us-east-2c"}
    assert all(
        r["gpu_count"] == 4
        and r["last_usd_per_gpu_hour"] == pytest.approx(r["last_usd_per_hour"] / 4)
        for r in rows
    )
    assert png.read_bytes()[:4] == b"\x89PNG"
    code, out, _ = run(capsys, "market", "prices", "--gpu", "A100", "--since", "2020-01-01")
    assert code == 1 and "No prices for A100" in out


def test_reliability_from_traces_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    folder = str(shared_path("traces", "cant-be-late", "preemption-1node-aws-2023-04-22"))
    code, out, _ = run(capsys, "market", "reliability", "--traces", folder, "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 4
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert (
        rows[0]["zone"] == "us-east-1c"
    )  # the zone with the most availability and fewest preemptions
    code, out, _ = run(capsys, "market", "reliability", "--traces", folder)
    assert code == 0 and "us-east-1c" in out and "MTBP" in out


def test_bad_input_is_one_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    code, _, err = run(capsys, "market", "import", str(junk))
    assert code == 2 and "unknown price file format" in err
    code, _, err = run(capsys, "market", "prices", "--since", "last tuesday")
    assert code == 2 and "--since" in err
    code, out, _ = run(capsys, "market", "reliability")
    assert code == 1 and "--traces" in out


def test_an_unknown_format_name_is_refused_listing_the_registered_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from spothop.market.sources import price_format_names

    path = str(shared_path("prices", "azure-low-priority-2020", "us_east.csv"))
    code, _, err = run(capsys, "market", "import", path, "--format", "parquet")
    assert code == 2 and "unknown format 'parquet'" in err
    assert all(name in err for name in price_format_names())


def test_the_import_help_lists_every_registered_format(capsys: pytest.CaptureFixture[str]) -> None:
    from spothop.market.sources import price_sources

    code, out, _ = run(capsys, "market", "import", "--help")
    flat = " ".join(out.replace("│", " ").split())
    assert code == 0 and all(source.name in flat for source in price_sources())
