import pytest

from spothop.errors import CurrencyError
from spothop.resources.currency import builtin_rates, load_rates


def test_builtin_table_is_dated_and_converts_cny():
    table = builtin_rates()
    assert table.as_of.year >= 2026
    assert 0.10 < table.to_usd(1.0, "CNY") < 0.20
    assert table.to_usd(100.0, "usd") == 100.0


def test_unknown_currency_names_itself_and_the_fix():
    with pytest.raises(CurrencyError, match=r"'XYZ'.*currency.yaml"):
        builtin_rates().to_usd(1.0, "XYZ")


def test_user_override_merges_over_builtin(spothop_home):
    (spothop_home / "currency.yaml").write_text(
        "as_of: 2030-01-01\nusd_per_unit:\n  cny: 0.5\n  XYZ: 2\n"
    )
    table = load_rates()
    assert table.to_usd(10.0, "CNY") == 5.0
    assert table.to_usd(1.0, "XYZ") == 2.0
    assert table.to_usd(1.0, "EUR") == builtin_rates().to_usd(1.0, "EUR")
    assert str(table.as_of) == "2030-01-01"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("usd_per_unit: [1, 2]", "as_of"),
        (
            "as_of: 2030-01-01\nusd_per_unit:\n  CNY: -1\n",
            "usd_per_unit.CNY must be greater than 0",
        ),
        ("as_of: 2030-01-01\nusd_per_unit:\n  CNY: .nan\n", "usd_per_unit.CNY must be .*got nan"),
        ("as_of: 2030-01-01\nusd_per_unit:\n  CNY: .inf\n", "usd_per_unit.CNY must be .*got inf"),
        ("as_of: 2030-01-01\nusd_per_unit:\n  CNY: 1e300\n", "at most 1000 USD per unit"),
        ("as_of: 2030-01-01\nusd_per_unit:\n  CNY: true\n", "must be a number"),
        (
            "as_of: 9999-01-01\nusd_per_unit:\n  CNY: 0.14\n",
            "as_of must be a date between 2006 and 2100",
        ),
        ("as_of: [unclosed", "not valid YAML"),
    ],
)
def test_malformed_override_is_a_clear_error(spothop_home, text, needle):
    (spothop_home / "currency.yaml").write_text(text)
    with pytest.raises(CurrencyError, match=needle):
        load_rates()


def test_missing_override_file_named_by_env_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SPOTHOP_FX_RATES", str(tmp_path / "nope.yaml"))
    with pytest.raises(CurrencyError, match="does not exist"):
        load_rates()


def test_a_rate_file_that_is_a_folder_is_a_clear_error(spothop_home):
    (spothop_home / "currency.yaml").mkdir()
    with pytest.raises(CurrencyError, match="is a folder"):
        load_rates()


def test_a_rate_file_that_is_not_text_is_a_clear_error(spothop_home):
    (spothop_home / "currency.yaml").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(CurrencyError, match="not a text file"):
        load_rates()
