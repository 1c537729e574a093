"""Currency normalisation: every price ends up in USD, with the rate it used on record.

The rate table ships in the package with its date (``data/currency.yaml``).
A user overrides any rate in ``$SPOTHOP_HOME/currency.yaml`` or in the file
``$SPOTHOP_FX_RATES`` names; overrides merge over the shipped table rate by
rate, and the newest ``as_of`` wins.
"""

from __future__ import annotations

import datetime as dt
import os
from functools import cache
from importlib import resources as importlib_resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spothop.bounds import USD_PER_CURRENCY_UNIT, check_datetime
from spothop.errors import CurrencyError, ValueOutOfRange
from spothop.paths import spothop_home


class RateTable(BaseModel):
    """USD per one unit of each currency, as of a date."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    as_of: dt.date
    source: str = ""
    usd_per_unit: dict[str, float] = Field(default_factory=dict)

    def to_usd(self, amount: float, currency: str) -> float:
        code = currency.strip().upper()
        rate = self.usd_per_unit.get(code)
        if rate is None:
            known = ", ".join(sorted(self.usd_per_unit))
            raise CurrencyError(
                f"no exchange rate for currency {currency!r} (known: {known}); "
                f"add it under usd_per_unit in {spothop_home() / 'currency.yaml'}"
            )
        return amount * rate

    def merged(self, override: RateTable) -> RateTable:
        return RateTable(
            as_of=max(self.as_of, override.as_of),
            source=override.source or self.source,
            usd_per_unit={**self.usd_per_unit, **override.usd_per_unit},
        )


def parse_rate_table(text: str, origin: str) -> RateTable:
    """Read a rate table from YAML text; ``origin`` names it in errors."""
    try:
        raw: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise CurrencyError(f"{origin}: not valid YAML{where}: {problem}; {_LAYOUT}") from None
    if not isinstance(raw, dict):
        raise CurrencyError(f"{origin}: expected a mapping; {_LAYOUT}")
    rates = raw.get("usd_per_unit")
    if isinstance(rates, dict):
        raw = {**raw, "usd_per_unit": {str(k).upper(): v for k, v in rates.items()}}
        for code, rate in raw["usd_per_unit"].items():
            try:
                USD_PER_CURRENCY_UNIT.check(rate, f"usd_per_unit.{code}")
            except ValueOutOfRange as exc:
                raise CurrencyError(f"{origin}: {exc}; {_LAYOUT}") from None
    if isinstance(raw.get("as_of"), dt.date):
        try:
            check_datetime(raw["as_of"], "as_of")
        except ValueOutOfRange as exc:
            raise CurrencyError(f"{origin}: {exc}") from None
    try:
        return RateTable.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise CurrencyError(f"{origin}: {problems}; {_LAYOUT}") from None


_LAYOUT = "write `as_of: YYYY-MM-DD` (the date of the rates) and `usd_per_unit:` with lines like `CNY: 0.14`"


@cache
def builtin_rates() -> RateTable:
    text = importlib_resources.files("spothop.resources").joinpath("data/currency.yaml").read_text()
    return parse_rate_table(text, "built-in currency.yaml")


def rate_override_paths() -> list[Path]:
    """Where the user's rate overrides may be: ``$SPOTHOP_HOME/currency.yaml``, then ``$SPOTHOP_FX_RATES``."""
    candidates = [spothop_home() / "currency.yaml"]
    if env := os.environ.get("SPOTHOP_FX_RATES"):
        candidates.append(Path(env))
    return candidates


def load_rates(override_path: Path | None = None) -> RateTable:
    """The shipped table, with the user's overrides merged over it."""
    table = builtin_rates()
    candidates = rate_override_paths()
    if override_path is not None:
        candidates.append(override_path)
    for path in candidates:
        if path.exists():
            table = table.merged(parse_rate_table(_read(path), str(path)))
        elif path is not candidates[0]:
            raise CurrencyError(f"rate file {path} does not exist")
    return table


def _read(path: Path) -> str:
    if path.is_dir():
        raise CurrencyError(
            f"rate file {path} is a folder; a rate table is a YAML file ({_LAYOUT})"
        )
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CurrencyError(f"cannot read rate file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CurrencyError(
            f"{path}: not a text file (byte {exc.start} is not UTF-8); {_LAYOUT}"
        ) from None
