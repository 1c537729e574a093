"""``spothop plan FILE``: where a job would run, and why — every factor of every candidate's score.

Loads the job file, asks the providers for offerings and live spot prices
(``--provider``, else the job's ``providers.allow``, else the controller's
own: the local world's clouds and the real ones in ``$SPOTHOP_PROVIDERS``), takes λ from spothop's own interruption history when the store has any
(priors otherwise), ranks with :func:`spothop.scheduler.rank` and shows the
spread :func:`spothop.scheduler.spread` would choose for the job's nodes or
workers. Nothing is launched, and spothop's own store is only read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from spothop.cli.output import console, note, print_json, table
from spothop.cli.remote import ServerOption, TokenOption, connect
from spothop.cli.views import plan_request
from spothop.db import DATABASE_URL_ENV
from spothop.errors import ConfigError, SpothopError
from spothop.jobs.spec import JobSpec, load_job
from spothop.market.reliability import ReliabilityBook
from spothop.paths import spothop_home
from spothop.providers.base import Provider
from spothop.providers.registry import get_provider
from spothop.scheduler.placement import DEFAULT_HORIZON_H

DEFAULT_LIMIT = 10


def _data_at(value: str | None, data_gib: float) -> tuple[str, str] | None:
    if value is None:
        if data_gib > 0:
            raise ConfigError("--data-gib needs --data-at PROVIDER/REGION: where the data is now")
        return None
    provider, _, region = value.partition("/")
    if not provider.strip() or not region.strip() or "/" in region:
        raise ConfigError(
            f"--data-at is PROVIDER/REGION (as `spothop offers` names them), got {value!r}"
        )
    return provider.strip(), region.strip()


def _providers(spec: JobSpec, names: list[str] | None) -> list[Provider]:
    """The providers to ask: ``--provider``, else the job's ``providers.allow``, else the
    controller's own (every cloud of the local world plus ``$SPOTHOP_PROVIDERS``).

    A provider that cannot be made (SDK missing, no credentials) is left out with its
    reason on stderr, as the controller leaves it out; a job that only it could carry is
    then told no offering satisfies it.
    """
    from spothop.jobs.controller.daemon import default_providers

    wanted = tuple(n for n in (names or spec.providers.allow) if n not in spec.providers.deny)
    if not wanted:
        made = default_providers()
        return [p for name, p in made.items() if name not in spec.providers.deny]
    providers: list[Provider] = []
    for name in dict.fromkeys(wanted):
        try:
            providers.append(get_provider(name))
        except SpothopError as exc:
            note(f"provider {name} left out: {exc}", stderr=True)
    return providers


def _history(now: float) -> ReliabilityBook | None:
    """The interruption history's book at ``now``, or None (priors) when there is no store to read.

    A home without a database has no history: it is not created just to be read.
    """
    from spothop.market.interruptions import reliability_from_store

    if not os.environ.get(DATABASE_URL_ENV) and not (spothop_home() / "spothop.db").exists():
        return None
    try:
        return reliability_from_store(now)
    except SpothopError:
        return None


def _cells(rank_no: int, c: dict[str, Any]) -> list[Any]:
    """One row of the table from a candidate's dict (``plan --json``'s ``candidates``)."""
    f = c["factors"]
    score = c["usd_per_useful_tflops_hour"]
    return [
        rank_no,
        c["provider"],
        c["zone"] or c["region"],
        c["instance_type"],
        f"{c['gpu_count']}× {c['gpu']}",
        c["market_kind"],
        f"{c['price_usd_per_hour']:.3f}",
        f"{c['preemption_rate_per_h']:.3f}",
        f"{f['checkpoint_interval_s'] / 60:.0f}",
        f"{c['goodput']:.3f}",
        f"{c['effective_tflops']:.0f}",
        f"{c['egress_usd']:.2f}",
        f"{score:.5f}" if score is not None else "inf",
    ]


COLUMNS = [
    "#",
    "provider",
    "location",
    "instance type",
    "GPUs",
    "market",
    "$/h",
    "λ/h",
    "ckpt min",
    "goodput",
    "eff TFLOPS",
    "egress $",
    "$/useful-TFLOPS-h",
]


def _show(data: dict[str, Any], limit: int) -> None:
    """``plan --json``'s object as the ranking's table, the spread and what was excluded."""
    shown = data["candidates"][:limit]
    console.print(
        table(
            f"{data['job']}: {data['candidate_count']} candidates from {data['offerings']} offerings, "
            "best (cheapest useful work) first",
            COLUMNS,
            [_cells(i + 1, c) for i, c in enumerate(shown)],
            right=["#", *COLUMNS[6:]],
        )
    )
    note(
        "score = ($/h ÷ goodput + egress $ ÷ horizon h) ÷ effective TFLOPS; goodput from λ, the "
        "checkpoint interval and save cost, restart and boot time (docs/placement.md)"
    )
    chosen = data["spread"]
    places = ", ".join(
        f"{c['provider']}/{c['zone'] or c['region']}/{c['instance_type']} ({c['market_kind']})"
        for c in chosen
    )
    zones = len({(c["provider"], c["zone"] or c["region"]) for c in chosen})
    types = len({(c["provider"], c["instance_type"]) for c in chosen})
    console.print(
        f"spread for {data['node_count']} node(s), asked ≥{data['min_zones']} zones and "
        f"≥{data['min_instance_types']} types, got {zones} and {types}: {places}"
    )
    if zones < data["min_zones"] or types < data["min_instance_types"]:
        note("the market allows no wider spread for these requirements now")
    excluded = {k: v for k, v in data["excluded"].items() if v}
    if excluded:
        note("excluded: " + ", ".join(f"{k} {v}" for k, v in excluded.items()))
    for reason in (data.get("refused") or {}).values():
        note(f"refused by the compatibility matrix: {reason}")


def plan(
    file: Annotated[Path, typer.Argument(help="the job file (YAML, or a SkyPilot task file)")],
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider", help="ask only these providers (repeatable; default: the job's)"
        ),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="show at most this many candidates")
    ] = DEFAULT_LIMIT,
    data_gib: Annotated[
        float,
        typer.Option(
            "--data-gib", min=0, help="GiB of inputs and checkpoint to move to the job (egress)"
        ),
    ] = 0.0,
    data_at: Annotated[
        str | None,
        typer.Option(
            "--data-at", help="where that data is now, as PROVIDER/REGION (needed with --data-gib)"
        ),
    ] = None,
    horizon_h: Annotated[
        float,
        typer.Option(
            "--horizon-h", min=0.001, help="useful hours the placement carries (egress spread over)"
        ),
    ] = DEFAULT_HORIZON_H,
    checkpoint_gpu: Annotated[
        str | None,
        typer.Option(
            "--checkpoint-gpu",
            help="the GPU the job's checkpoint was made on: keep only GPUs it may move to "
            "(the compatibility matrix, under the spec's checkpoint.compatibility)",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print the ranking, the spread and what was excluded as JSON"),
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """Rank where a job would run by the expected cost of useful work, and show the spread chosen."""
    spec = load_job(file)
    _data_at(data_at, data_gib)  # a bad --data-at is this machine's error, server or not
    client = connect(server, token)
    if client is not None:
        data = client.plan(
            spec.to_json(),
            file.name,
            providers=list(provider or ()),
            limit=limit,
            data_gib=data_gib,
            data_at=data_at,
            horizon_h=horizon_h,
            # Sent only when given, so that a server without the option still answers the rest.
            **({"checkpoint_gpu": checkpoint_gpu} if checkpoint_gpu is not None else {}),
        )
    else:
        data = plan_request(
            spec,
            provider or (),
            limit=limit,
            data_gib=data_gib,
            data_at=data_at,
            horizon_h=horizon_h,
            checkpoint_gpu=checkpoint_gpu,
        )
    if as_json:
        print_json(data)
        return
    _show(data, limit)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
