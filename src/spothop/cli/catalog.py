"""``spothop catalog``: import other catalogs, refresh one from its cloud, compare versions, summarise."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from spothop.bounds import check_datetime
from spothop.cli.output import console, err_console, note, print_json, table
from spothop.errors import CatalogError, ConfigError, NotFoundError, exit_for_counts
from spothop.paths import user_catalog_dir
from spothop.providers.catalog_refresh import refresh_catalog
from spothop.providers.registry import get_provider
from spothop.resources.catalog import (
    Catalog,
    builtin_offerings,
    load_catalog,
    read_catalog_path,
    save_user_offerings,
)
from spothop.resources.catalog_summary import summarise
from spothop.resources.diff import diff_catalogs
from spothop.resources.offering import Offering
from spothop.resources.sources.skypilot import (
    ImportReport,
    import_skypilot_file,
    iter_skypilot_paths,
)

catalog_app = typer.Typer(
    help="Import, compare and summarise offering catalogs.", no_args_is_help=True
)

FORMATS = ("skypilot",)


@catalog_app.command("import")
def import_(
    paths: Annotated[
        list[Path], typer.Argument(help="vms.csv files, or folders holding */vms.csv")
    ],
    fmt: Annotated[str, typer.Option("--format", help="source format: skypilot")] = "skypilot",
    provider: Annotated[
        str | None,
        typer.Option(
            "--provider", help="provider name (default: the name of the folder the file is in)"
        ),
    ] = None,
    price_date: Annotated[
        str | None,
        typer.Option(
            "--price-date", help="date the prices were taken, YYYY-MM-DD (default: today)"
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="read and report, but save nothing")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Import offerings from another tool's catalog; every row is imported or reported with its reason.

    Imported offerings are saved per provider in $SPOTHOP_HOME/catalog/ and
    replace that provider's built-in rows.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    date = _parse_date(price_date)
    for path in paths:
        if not path.exists():
            raise NotFoundError(
                f"{path} does not exist; give SkyPilot vms.csv files or folders that hold them"
            )
    files = list(iter_skypilot_paths(paths))
    if not files:
        raise CatalogError(f"no vms.csv found under {', '.join(map(str, paths))}")
    reports = [import_skypilot_file(p, provider, date) for p in files]
    saved = {} if dry_run else _save(reports)
    if as_json:
        print_json([r.to_dict(saved.get(r.provider)) for r in reports])
    else:
        for report in reports:
            _print_report(report, saved.get(report.provider))
    # Refused rows are a partial import (exit 5), all refused a failed one (exit 1): docs/cli.md.
    # Rows out of scope (CPU-only types) are no failure: every SkyPilot catalog has them.
    code = exit_for_counts(
        sum(len(r.offerings) for r in reports),
        sum(not e.out_of_scope for r in reports for e in r.refused),
    )
    if code:
        raise typer.Exit(code)


def _parse_date(value: str | None) -> dt.date | None:
    if value is None:
        return None
    try:
        date = dt.date.fromisoformat(value)
    except ValueError:
        raise ConfigError(f"--price-date must be YYYY-MM-DD, got {value!r}") from None
    return check_datetime(date, "--price-date")  # refused once, not on every row


def _save(reports: list[ImportReport]) -> dict[str, Path]:
    by_provider: dict[str, list[Offering]] = defaultdict(list)
    sources: dict[str, list[str]] = defaultdict(list)
    for report in reports:
        by_provider[report.provider].extend(report.offerings)
        sources[report.provider].append(report.path)
    saved = {}
    for name, offerings in by_provider.items():
        if offerings:
            comment = (
                f"Imported by `spothop catalog import` on {dt.date.today()} from:\n"
                + "\n".join(sources[name])
            )
            saved[name] = save_user_offerings(name, offerings, comment)
    return saved


def _print_report(report: ImportReport, saved: Path | None) -> None:
    console.print(
        Text.assemble(
            (str(report.path), "bold"),
            f" ({report.provider}): {report.rows} rows, {len(report.offerings)} imported, {len(report.refused)} refused"
            + (f" → saved to {saved}" if saved else ""),
        )
    )
    reasons = Counter(_reason_kind(e.reason) for e in report.refused)
    if reasons:
        rows = [[count, reason] for reason, count in reasons.most_common()]
        console.print(table("refused rows, by reason", ["rows", "reason"], rows, right=["rows"]))
        for error in report.refused[:5]:
            note(f"  {error}", stderr=True)
        if len(report.refused) > 5:
            note(f"  … {len(report.refused) - 5} more (use --json for all)", stderr=True)


def _reason_kind(reason: str) -> str:
    # Group "unknown GPU 'RTX5090'; did you mean …" by its first clause.
    return reason.split(";")[0].split(":")[0]


@catalog_app.command("diff")
def diff(
    old: Annotated[
        str, typer.Argument(help="old catalog: a spothop CSV file, a folder of them, or 'builtin'")
    ],
    new: Annotated[
        str, typer.Argument(help="new catalog: a spothop CSV file, a folder of them, or 'builtin'")
    ],
    min_change: Annotated[
        float, typer.Option("--min-change", help="ignore price moves below this many percent")
    ] = 0.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the change events as JSON")
    ] = False,
) -> None:
    """Compare two catalogs: offerings added and removed, prices and specs changed."""
    if not min_change >= 0:  # `not >=` also refuses NaN
        raise ConfigError(f"--min-change must be zero or more percent, got {min_change}")
    changes = diff_catalogs(_load_side(old), _load_side(new), min_change)
    if as_json:
        print_json([c.to_dict() for c in changes])
        return
    kinds = Counter(c.kind for c in changes)
    for change in changes:
        console.print(change.describe(), highlight=False)
    summary = (
        ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(kinds.items())) or "no changes"
    )
    console.print(Text(summary, style="bold"))


@catalog_app.command("refresh")
def refresh(
    provider: Annotated[
        str,
        typer.Option(
            "--provider",
            help="the provider to ask, by name (an unknown name is answered with the known ones)",
        ),
    ],
    min_change: Annotated[
        float, typer.Option("--min-change", help="ignore price moves below this many percent")
    ] = 0.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="show the changes, but save nothing")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the result and its change events as JSON")
    ] = False,
) -> None:
    """Ask a provider for its offerings now and apply the changes to the stored catalog.

    Only the regions the provider answered for are compared; the result is
    saved as that provider's catalog in $SPOTHOP_HOME/catalog/ and used from
    the next command on (no restart). Notes say what the provider could not
    get live (a price API out of reach: the built-in prices stand in).
    """
    if not min_change >= 0:  # `not >=` also refuses NaN
        raise ConfigError(f"--min-change must be zero or more percent, got {min_change}")
    result = refresh_catalog(get_provider(provider), min_change_pct=min_change, save=not dry_run)
    if as_json:
        print_json(result.to_dict())
        return
    for text in result.notes:
        note(f"note: {text}", stderr=True)
    for change in result.changes:
        console.print(change.describe(), highlight=False)
    kinds = Counter(c.kind for c in result.changes)
    summary = (
        ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(kinds.items())) or "no changes"
    )
    where = f"saved to {result.saved}" if result.saved else "dry run: nothing saved"
    console.print(
        Text(
            f"{result.provider} ({', '.join(result.regions)}): {result.live_offerings} live offerings, "
            f"{summary}; {where}",
            style="bold",
        )
    )


def _load_side(spec: str) -> list[Offering]:
    if spec == "builtin":
        return builtin_offerings()
    path = Path(spec)
    if not path.exists():
        raise CatalogError(
            f"catalog {spec!r} does not exist (give a CSV file, a folder, or 'builtin')"
        )
    result = read_catalog_path(path)
    for error in result.errors:
        err_console.print(Text.assemble(("skipped", "yellow"), f" {error}"))
    return result.offerings


def warn_refused(catalog: Catalog) -> None:
    """One stderr line per imported row that did not load: the command goes on with the rest."""
    for error in catalog.refused[:5]:
        err_console.print(Text.assemble(("skipped", "yellow"), f" {error}"))
    if len(catalog.refused) > 5:
        note(f"  … {len(catalog.refused) - 5} more rows of imported catalogs skipped", stderr=True)
    if catalog.refused:
        note(
            f"  fix or re-import the files in {user_catalog_dir()} (`spothop catalog import`)",
            stderr=True,
        )


@catalog_app.command("summary")
def summary(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Offerings per provider: how many, which GPUs, how many with a spot market, price dates."""
    catalog = load_catalog()
    warn_refused(catalog)
    rows = summarise(catalog)
    if as_json:
        print_json([r.to_dict() for r in rows])
        return
    columns = ["provider", "offerings", "spot", "regions", "GPU models", "prices from", "source"]
    console.print(
        table(
            f"{len(catalog)} offerings (imports in {user_catalog_dir()})",
            columns,
            [
                [
                    r.provider,
                    r.offerings,
                    r.with_spot,
                    r.regions,
                    len(r.gpus),
                    f"{r.oldest_price} … {r.newest_price}",
                    ", ".join(r.sources),
                ]
                for r in rows
            ],
            right=["offerings", "spot", "regions", "GPU models"],
        )
    )


def register(app: typer.Typer) -> None:
    app.add_typer(catalog_app, name="catalog")
