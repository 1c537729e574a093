from tests.conftest import shared_path


def test_import_lambda_and_vast_then_offers_include_them(cli, spothop_home):
    folder = shared_path("catalog", "skypilot-v7")
    result = cli(
        "catalog",
        "import",
        "--format",
        "skypilot",
        "--price-date",
        "2026-11-01",
        "--json",
        str(folder / "lambda" / "vms.csv"),
        str(folder / "vast" / "vms.csv"),
    )
    assert result.code == 0, result.err
    reports = {r["provider"]: r for r in result.json()}
    assert reports["lambda"]["rows"] == 323
    assert reports["lambda"]["imported"] + len(reports["lambda"]["refused"]) == 323
    assert reports["vast"]["imported"] + len(reports["vast"]["refused"]) == 61
    assert (spothop_home / "catalog" / "lambda.csv").exists()
    rows = cli("offers", "--provider", "lambda", "--on-demand", "--json").json()
    assert len(rows) == reports["lambda"]["imported"]
    summary = {r["provider"]: r for r in cli("catalog", "summary", "--json").json()}
    assert summary["vast"]["sources"] == ["imported"]


def test_import_dry_run_saves_nothing(cli, spothop_home):
    folder = shared_path("catalog", "skypilot-v7")
    result = cli("catalog", "import", "--dry-run", str(folder))
    assert result.code == 0 and "323 rows" in result.out
    assert not (spothop_home / "catalog").exists()


def test_import_unknown_format_and_missing_file(cli, tmp_path):
    assert "must be one of" in cli("catalog", "import", "--format", "dstack", str(tmp_path)).err
    result = cli("catalog", "import", str(tmp_path / "nope.csv"))
    assert result.code == 3 and "does not exist" in result.err  # not found


def test_diff_reports_typed_changes(cli, tmp_path):
    old = tmp_path / "old.csv"
    new = tmp_path / "new.csv"
    assert cli("catalog", "diff", "builtin", "builtin", "--json").json() == []
    from spothop.resources.catalog import builtin_offerings, format_catalog_csv

    offerings = builtin_offerings()[:10]
    old.write_text(format_catalog_csv(offerings))
    changed = [
        o.model_copy(update={"on_demand_price_original": o.on_demand_price_original * 2})
        for o in offerings[1:]
    ]
    new.write_text(format_catalog_csv(changed))
    events = cli("catalog", "diff", str(old), str(new), "--json").json()
    kinds = sorted({e["kind"] for e in events})
    assert kinds == ["price_changed", "removed"]
    assert all(abs(e["change_pct"] - 100) < 1e-6 for e in events if e["kind"] == "price_changed")
    text = cli("catalog", "diff", str(old), str(new)).out
    assert "1 removed" in text and "9 price changed" in text
