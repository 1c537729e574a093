"""``spothop report``: what a job cost against on-demand, its interruptions, work recomputed, goodput.

``spothop report JOB`` brings the job's ledger up to date (one billing record
per instance attempt, under each provider's billing rule), reconciles it with
the clouds' own bills, and prints the figures of :mod:`spothop.observe.report`
with recommendations. ``spothop report --since 30d --by provider|job|tag``
sums the ledger across jobs. ``--json`` and ``--csv`` print the same figures
for machines. See ``docs/observe.md``.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from spothop.cli.output import console, money, note, print_json, table
from spothop.cli.remote import ServerOption, TokenOption, connect
from spothop.errors import ConfigError
from spothop.service.report import CostQuery, costs, job_report

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        envvar="SPOTHOP_DATABASE_URL",
        help="job store URL: sqlite:///PATH or postgresql://HOST/DB (default: the home's SQLite)",
    ),
]


def register(app: typer.Typer) -> None:
    app.command("report")(report)


def report(
    job_id: Annotated[
        str | None, typer.Argument(help="job id (j-…); none: a report across jobs")
    ] = None,
    since: Annotated[
        str, typer.Option("--since", help="across jobs: attempts launched this long ago or since")
    ] = "30d",
    by: Annotated[
        str, typer.Option("--by", help="across jobs: group by provider, job, tag, zone or market")
    ] = "provider",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="print CSV")] = False,
    store_url: StoreOption = None,
    plot: Annotated[
        Path | None, typer.Option("--plot", help="JOB: draw its timeline to this PNG (matplotlib)")
    ] = None,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """A job's cost against on-demand, interruptions, recomputed work and goodput; or a sum across jobs."""
    if as_json and as_csv:
        raise ConfigError("--json and --csv: pick one")
    if plot is not None and job_id is None:
        raise ConfigError("--plot draws one job's timeline: give the JOB id")
    client = connect(server, token)
    if client is not None and plot is not None:
        raise ConfigError(
            "--plot draws from the embedded store's timeline; with --server, read the "
            "server's dashboard (/dashboard) or drop --plot"
        )
    if client is not None:
        data = client.report(job_id) if job_id is not None else client.costs(since, by)
    else:
        data = _local(job_id, since, by, store_url, plot)
    if job_id is None:
        _show_across(data, as_json, as_csv)
    elif as_json:
        print_json(data)
    elif as_csv:
        _csv(data["records"], RECORD_COLUMNS)
    else:
        _show(data)


def _local(
    job_id: str | None, since: str, by: str, store_url: str | None, plot: Path | None
) -> dict[str, Any]:
    from spothop.db import store_to_read
    from spothop.jobs.store import JobStore
    from spothop.providers.registry import default_providers

    providers = default_providers()
    with JobStore(store_to_read(store_url)) as store:
        if job_id is None:
            return costs(store, providers, CostQuery(since, by)).to_dict()
        data = job_report(store, job_id, providers).to_dict()
        if plot is not None:  # the timeline of instances and preemptions (observe/timeline.py)
            from spothop.observe.timeline import job_timeline, plot_timeline

            note(
                f"timeline: {plot_timeline(job_timeline(store, job_id), plot, job_id)}",
                stderr=True,
            )
        return data


RECORD_COLUMNS = [
    "attempt_id",
    "node",
    "provider",
    "zone",
    "instance_type",
    "market",
    "price_usd_per_hour",
    "usage_s",
    "billed_s",
    "cost_microusd",
    "provider_cost_microusd",
    "closed",
]


def _show_across(data: dict[str, Any], as_json: bool, as_csv: bool) -> None:
    from spothop.observe.billing import usd

    rows = data["groups"]
    if as_json:
        print_json(data)
        return
    if as_csv:
        _csv(
            rows, ["key", "cost_microusd", "billed_s", "attempts", "interruptions", "price_missing"]
        )
        return
    by, since = data["by"], data["since"]
    console.print(
        table(
            f"cost by {by}, attempts launched in the last {since}",
            [by, "cost USD", "billed h", "attempts", "interruptions", "no price"],
            [
                (
                    s["key"],
                    money(usd(s["cost_microusd"]), 4),
                    f"{s['billed_s'] / 3600:.3f}",
                    s["attempts"],
                    s["interruptions"],
                    s["price_missing"] or "",
                )
                for s in rows
            ],
            right=["cost USD", "billed h", "attempts", "interruptions"],
        )
    )
    if not rows:
        note("no attempts in that span")


def _csv(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    writer = csv.DictWriter(sys.stdout, fieldnames=list(columns), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow(row)


def _usd(value: float | None, digits: int = 4) -> str:
    return "missing" if value is None else f"{value:,.{digits}f}"


def _show(d: dict[str, Any]) -> None:
    """The report of ``report JOB --json`` as tables, then its recommendations."""
    console.print(Text.assemble("job ", (d["job_id"], "bold"), f" ({d['name']}) · {d['state']}"))
    if d.get("reason"):  # a budget reached, a deadline missed: said where the cost is
        console.print(f"reason: {d['reason']}")
    console.print(table(None, ["figure", "value"], _figures(d)))
    for missing in d["missing_prices"]:
        note(f"price missing: {missing}", "yellow")
    for missing in d["missing_on_demand_prices"]:
        note(f"on-demand price missing: {missing}", "yellow")
    for by in ("provider", "zone", "market"):
        splits = d[f"by_{by}"]
        console.print(
            table(
                f"by {by}",
                [by, "cost USD", "billed h", "attempts", "interruptions"],
                [
                    (
                        s["key"],
                        _usd(s["cost_usd"]),
                        f"{s['billed_s'] / 3600:.3f}",
                        s["attempts"],
                        s["interruptions"],
                    )
                    for s in splits
                ],
                right=["cost USD", "billed h", "attempts", "interruptions"],
            )
        )
    if d["interruptions"]:
        console.print(_interruptions(d["interruptions"]))
    if d.get("restores"):
        console.print(_restores(d["restores"]))
    for advice in d["recommendations"]:
        console.print(Text.assemble(("→ ", "bold"), advice["message"]))


def _figures(d: dict[str, Any]) -> list[tuple[str, str]]:
    """The report's headline figures, one (figure, value) row each."""
    saving = d["saving_fraction"]
    return [
        ("cost", f"{_usd(d['cost_usd'])} USD"),
        (
            "on-demand, same useful work",
            f"{_usd(d['on_demand_cost_usd'])} USD (with one boot per node and the billing minimum)",
        ),
        (
            "saving",
            f"{_usd(d['saving_usd'])} USD" + (f" ({saving:.0%})" if saving is not None else ""),
        ),
        ("interruptions survived", str(d["interruption_count"])),
        ("goodput", "—" if d["goodput"] is None else f"{d['goodput']:.1%}"),
        (
            "recomputed",
            ("—" if d["recomputed_fraction"] is None else f"{d['recomputed_fraction']:.1%}")
            + f" of paid GPU time, {_usd(d['recomputed_cost_usd'])} USD",
        ),
        ("USD per effective-TFLOPS-hour", _usd(d["usd_per_effective_tflops_hour"])),
        *_unreported(d),
        *_reconciliation(d["reconciliation"]),
    ]


def _unreported(d: dict[str, Any]) -> list[tuple[str, str]]:
    """The attempts paid for with no work their agents reported: not in goodput's useful time."""
    attempts = d.get("unreported_attempts") or []
    if not attempts:
        return []
    share = d["unreported_gpu_s"] / d["paid_gpu_s"] if d["paid_gpu_s"] else 0.0
    return [
        (
            "no work reported",
            f"{len(attempts)} attempt(s), {share:.1%} of paid GPU time: their agents reported no "
            "step, save, shard or clean exit, so goodput counts none of it",
        )
    ]


def _reconciliation(d: dict[str, Any]) -> list[tuple[str, str]]:
    """One row per provider: reconciled against its bill, or estimated, not reconciled."""
    rows = [(f"bill, {p['provider']}", p["summary"]) for p in d.get("by_provider") or []]
    return rows or [("bill", "—")]


def _interruptions(rows: Sequence[dict[str, Any]]) -> Table:
    return table(
        "interruptions",
        ["instance", "provider", "zone", "type", "cause", "lead s", "saved", "save s"],
        [
            (
                i["instance_id"],
                i["provider"],
                i["zone"],
                i["instance_type"],
                i["cause"],
                _num(i["lead_time_s"]),
                i["saved"],
                _num(i["save_s"]),
            )
            for i in rows
        ],
        right=["lead s", "save s"],
    )


def _restores(rows: Sequence[dict[str, Any]]) -> Table:
    return table(
        "restores",
        ["checkpoint", "step", "served by", "instance in", "own region", "seconds"],
        [
            (
                r["checkpoint_id"],
                r["step"],
                r["served_by"],
                "/".join(x for x in (r["provider"], r["region"]) if x) or "?",
                "yes" if r["from_own_region"] else "no",
                f"{r['seconds']:.3f}",
            )
            for r in rows
        ],
        right=["step", "seconds"],
    )


def _num(value: float | None) -> str | None:
    return None if value is None else f"{value:.1f}"
