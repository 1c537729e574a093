"""Any text as a currency rate table: bounded rates and a plausible date, or CurrencyError naming the file."""

from __future__ import annotations

import math
from importlib import resources as importlib_resources

from hypothesis import given

from spothop.bounds import USD_PER_CURRENCY_UNIT, YEAR_FIRST, YEAR_LAST
from spothop.errors import CurrencyError
from spothop.resources.currency import parse_rate_table
from tests.hostile_text import PROPERTY_SETTINGS, head, hostile

SAMPLES = [
    head(
        importlib_resources.files("spothop.resources").joinpath("data/currency.yaml").read_text(),
        30,
    ),
    "as_of: 2026-11-20\nusd_per_unit:\n  CNY: 0.139\n",
    "as_of: 2026-11-20\nsource: mine\nusd_per_unit: {cny: 0.14, EUR: 1.08, JPY: 0.0066}\n",
    "a: &x [1, 2]\nas_of: 2026-01-01\nusd_per_unit: {CNY: *x}\n",
]


@PROPERTY_SETTINGS
@given(hostile(SAMPLES))
def test_any_rate_file_gives_bounded_rates_or_an_error_naming_the_file(text: str) -> None:
    try:
        table = parse_rate_table(text, "currency.yaml")
    except CurrencyError as exc:
        assert str(exc).startswith("currency.yaml: ")
        return
    assert YEAR_FIRST <= table.as_of.year <= YEAR_LAST
    for code, rate in table.usd_per_unit.items():
        assert code == code.upper()
        assert (
            math.isfinite(rate) and USD_PER_CURRENCY_UNIT.low < rate <= USD_PER_CURRENCY_UNIT.high
        )
