"""``spothop market``: price history (import, show, plot, forecast) and market reliability."""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from spothop.bounds import YEAR_FIRST, check_datetime
from spothop.cli.output import console, err_console, note, print_json, table
from spothop.errors import ConfigError, exit_for_counts
from spothop.market.interruptions import reliability_from_store
from spothop.market.price_store import PriceStore, StoredPrice
from spothop.market.price_window import FORECAST_HORIZON_H, PriceWindow
from spothop.market.reliability import ReliabilityBook
from spothop.market.sources import formats_help, price_format_names
from spothop.market.trace_markets import evidence_from_traces, trace_files

market_app = typer.Typer(
    help="Spot price history, forecasts and market reliability.", no_args_is_help=True
)

_UNITS_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")
PROBLEMS_SHOWN = 20  # the table shows the first few; --json lists every one


def catalog_fix(types: list[str]) -> str:
    """How to give stored ``provider/type`` names their GPU: import a catalog for each provider."""
    providers = sorted({name.partition("/")[0] for name in types})
    imports = "; ".join(f"`spothop catalog import vms.csv --provider {p}`" for p in providers)
    return (
        f"to fix, import a catalog that lists these types ({imports}; it replaces that provider's built-in "
        "rows), then run `spothop market import` again"
    )


def parse_when(text: str, now: datetime | None = None) -> datetime:
    """``7d``/``12h``/``2w`` before now, or an ISO date/time (UTC unless it says otherwise)."""
    match = _RELATIVE.match(text)
    if match:
        try:
            stamp = (now or datetime.now(UTC)) - timedelta(
                seconds=float(match.group(1)) * _UNITS_S[match.group(2)]
            )
        except (OverflowError, ValueError):  # a span that reaches before year 1
            raise ConfigError(
                f"--since/--until {text!r} reaches before {YEAR_FIRST}; use a shorter span"
            ) from None
    else:
        try:
            stamp = datetime.fromisoformat(text.strip())
        except ValueError:
            raise ConfigError(
                f"--since/--until {text!r}: use a span like 7d, 12h, 2w or a date like 2020-01-01"
            ) from None
    # Bounded, so an hourly grid cannot reach the year 9999 (spothop.bounds: 2006 to 2100).
    return check_datetime(
        stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp, "--since/--until"
    )


def _duration_s(text: str) -> float:
    match = _RELATIVE.match(text)
    if not match:
        raise ConfigError(f"--window {text!r}: use a span like 7d, 24h or 2w")
    return float(match.group(1)) * _UNITS_S[match.group(2)]


def _gpu_names(gpu: str | None) -> list[str] | None:
    if gpu is None:
        return None
    from spothop.resources.gpus import match_gpus

    names = [m.name for m in match_gpus(gpu)]
    if not names:
        raise ConfigError(f"--gpu {gpu!r} matches no GPU model (`spothop gpus` lists them)")
    return names


# -- import -----------------------------------------------------------------


def import_prices(
    files: Annotated[list[Path], typer.Argument(help=f"price files, any of: {formats_help()}")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format", help=f"{', '.join(price_format_names())} (default: detected from the file)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Import price history into the store; re-importing a file adds nothing.

    The format is detected from each file's first bytes; --format forces one.
    """
    store = PriceStore()
    reports = [store.import_file(path, fmt) for path in files]
    # Points stored before `spothop catalog import` taught spothop their type get their GPU now.
    filled = store.fill_gpu_counts()
    # Rejected lines are a partial import (exit 5), all rejected a failed one (exit 1): docs/cli.md.
    code = exit_for_counts(
        sum(r.read - len(r.rejected) for r in reports), sum(len(r.rejected) for r in reports)
    )
    if as_json:
        print_json([r.to_dict() for r in reports])
        raise typer.Exit(code)
    rows = [
        [
            Path(r.path).name,
            r.format,
            r.read,
            r.added,
            len(r.duplicates),
            len(r.rejected),
            len(r.out_of_order),
        ]
        for r in reports
    ]
    console.print(
        table(
            "price import",
            ["file", "format", "read", "added", "duplicates", "rejected", "out of order"],
            rows,
            right=["read", "added", "duplicates", "rejected", "out of order"],
        )
    )
    problems = [p for r in reports for p in r.problems]
    for problem in problems[:PROBLEMS_SHOWN]:
        err_console.print(f"  {problem}", highlight=False)
    if len(problems) > PROBLEMS_SHOWN:
        err_console.print(f"  … and {len(problems) - PROBLEMS_SHOWN} more (--json lists all)")
    if filled:
        err_console.print(
            f"{filled} stored point(s) of types the catalog now lists got their GPU and per-GPU price",
            highlight=False,
        )
    missing = sorted({t for r in reports for t in r.no_gpu_count})
    if missing:
        err_console.print(
            f"per-GPU prices unavailable (not in the catalog, prices kept per instance): {', '.join(missing)}"
            f"; {catalog_fix(missing)}",
            highlight=False,
        )
    if code:
        raise typer.Exit(code)


# -- prices -----------------------------------------------------------------


def prices(
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="GPU name or family (A100, V100)")
    ] = None,
    since: Annotated[
        str, typer.Option("--since", help="7d, 12h, 2w before now, or a date (2020-01-01)")
    ] = "7d",
    until: Annotated[
        str | None, typer.Option("--until", help="end: a span before now or a date")
    ] = None,
    provider: Annotated[str | None, typer.Option("--provider", help="only this provider")] = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="also draw the prices to this PNG")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Price history per market in a window, with the last price, range and a 6-hour forecast."""
    store = PriceStore()
    start, end = parse_when(since), parse_when(until) if until else None
    found = store.points(since=start, until=end, gpus=_gpu_names(gpu), provider=provider)
    if not found:
        held = store.time_range()
        span = (
            f"the store holds prices from {held[0]:%Y-%m-%d %H:%M} to {held[1]:%Y-%m-%d %H:%M} UTC"
            if held
            else "the store holds no prices yet (`spothop market import FILE`)"
        )
        console.print(
            f"No prices{f' for {gpu}' if gpu else ''} since {start:%Y-%m-%d %H:%M} UTC; {span}.",
            highlight=False,
        )
        unmatched = store.types_without_gpu() if gpu else []
        if unmatched:
            # A type the catalog lacks has no GPU in the store, so --gpu cannot find it (AWS p2.* carry K80s).
            console.print(
                f"{len(unmatched)} stored instance type(s) have no GPU because the catalog does not list "
                f"them, so --gpu cannot match them: {', '.join(unmatched)}. See them with --provider "
                f"instead of --gpu; {catalog_fix(unmatched)}.",
                highlight=False,
            )
        raise typer.Exit(1)
    grouped: dict[Any, list[StoredPrice]] = {}
    for point in found:
        grouped.setdefault(point.series, []).append(point)
    # Forecasts use each series' whole stored history, not just the window shown.
    windows = [PriceWindow.of(points, store.points(series=key)) for key, points in grouped.items()]
    if as_json:
        print_json([w.to_dict() for w in windows])
    else:
        columns = [
            "provider",
            "location",
            "instance type",
            "market",
            "GPU",
            "points",
            "last $/h",
            "min",
            "max",
            "$/GPU-h",
            f"{FORECAST_HORIZON_H}h forecast",
            "method",
        ]
        console.print(
            table(
                f"{len(windows)} price series since {start:%Y-%m-%d %H:%M} UTC",
                columns,
                [
                    [
                        w.series.market.provider,
                        w.series.market.location,
                        w.series.market.instance_type,
                        w.series.market_kind,
                        w.gpu,
                        w.points,
                        f"{w.last_usd_per_hour:.4f}",
                        f"{w.min_usd_per_hour:.4f}",
                        f"{w.max_usd_per_hour:.4f}",
                        _fmt(w.last_usd_per_gpu_hour),
                        f"{w.forecast_usd_per_hour:.4f}",
                        w.forecast_method,
                    ]
                    for w in windows
                ],
                right=columns[5:11],
            )
        )
    if plot is not None:
        _plot(grouped, plot)
        if not as_json:
            console.print(f"plot written to {plot}")


def _fmt(value: float | None) -> str | None:
    return None if value is None else f"{value:.4f}"


def _plot(grouped: dict[Any, list[StoredPrice]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5.5))
    for key, points in sorted(grouped.items()):
        per_gpu = all(p.usd_per_gpu_second is not None for p in points)
        ys = [
            (p.usd_per_gpu_second or 0) * 3600 if per_gpu else p.price_usd_per_hour for p in points
        ]
        when = np.array(
            [p.timestamp.replace(tzinfo=None) for p in points], dtype="datetime64[ms]"
        )  # UTC
        ax.step(
            when,
            ys,
            where="post",
            linewidth=1,
            label=f"{key.market.slug}{'' if per_gpu else ' (per instance)'}",
        )
    ax.set_ylabel("USD per GPU-hour (per instance-hour where the GPU count is unknown)")
    ax.set_title("spot price history")
    if len(grouped) <= 20:  # a legend of more lines hides the plot
        ax.legend(fontsize=7, loc="best")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- reliability ------------------------------------------------------------


def reliability(
    traces: Annotated[
        Path | None,
        typer.Option("--traces", help="compute from a folder of Can't Be Late / SpotHedge traces"),
    ] = None,
    window: Annotated[
        str, typer.Option("--window", help="sliding window (7d: the last week)")
    ] = "7d",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Per market: preemption rate λ, mean time between preemptions, availability, score."""
    window_s = _duration_s(window)
    if traces is not None:
        evidence = [e for e, _ in evidence_from_traces(trace_files(traces), window_s)]
        book = ReliabilityBook.from_evidence(evidence)
    else:
        book = reliability_from_store(time.time(), window_s=window_s)
    ranked = book.ranked()
    if as_json:
        print_json([r.to_dict() for r in ranked])
        return
    if not ranked:
        console.print(
            "No preemption history yet; pass --traces DIR to score markets from published traces."
        )
        raise typer.Exit(1)
    columns = [
        "provider",
        "location",
        "instance type",
        "GPU",
        "λ /h",
        "MTBP",
        "avail",
        "score",
        "preempt",
        "inst-h",
        "lifetime",
        "regain",
        "prior",
    ]
    rows = [
        [
            r.market.provider,
            r.market.location,
            r.market.instance_type,
            r.gpu,
            f"{r.preemption_rate_per_h:.3f}",
            _hours(r.mean_time_between_preemptions_s),
            f"{r.availability:.2f}",
            f"{r.score:.3f}",
            r.preemptions,
            f"{r.instance_hours:.1f}",
            _hours(r.mean_lifetime_s),
            _hours(r.mean_time_to_regain_s),
            f"{r.prior.source} {r.prior.rate_per_h:.3f}/h",
        ]
        for r in ranked
    ]
    title = f"{len(ranked)} markets, most reliable first (window {window}{', from traces' if traces else ''})"
    console.print(table(title, columns, rows, right=columns[4:12]))
    note(
        "score = availability × exp(−λ × 1 h); λ shrunk towards the provider+GPU prior "
        "(Gamma–Poisson); see docs/market.md."
    )


def _hours(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return "∞" if math.isinf(seconds) else f"{seconds / 3600:.1f} h"


market_app.command("import")(import_prices)
market_app.command("prices")(prices)
market_app.command("reliability")(reliability)


def register(app: typer.Typer) -> None:
    app.add_typer(market_app, name="market")
