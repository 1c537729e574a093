"""``spothop plan FILE``: where a job would run, and why — every factor of every candidate's score.

Loads the job file, asks the providers for offerings and live spot prices
(``--provider``, else the job's ``providers.allow``, else the controller's
own: the local world's clouds and the real ones in ``$SPOTHOP_PROVIDERS``), takes λ from spothop's own interruption history when the store has any
(priors otherwise), ranks with :func:`spothop.scheduler.rank` and shows the
spread :func:`spothop.scheduler.spread` would choose for the job's nodes or
workers. Nothing is launched, and spothop's own store is only read.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from spothop.cli.output import console, note, print_json, table
from spothop.db import DATABASE_URL_ENV
from spothop.errors import ConfigError, SpothopError
from spothop.jobs.controller.observe import reserved_pools
from spothop.jobs.controller.place import plan_inputs
from spothop.jobs.spec import JobSpec, load_job
from spothop.market.reliability import ReliabilityBook
from spothop.paths import spothop_home
from spothop.providers.base import Provider
from spothop.providers.registry import get_provider
from spothop.scheduler.market_view import gather_market_view
from spothop.scheduler.placement import DEFAULT_HORIZON_H, Candidate, Ranking, rank
from spothop.scheduler.spread import spread

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


def _cells(rank_no: int, c: Candidate) -> list[Any]:
    f = c.factors
    return [
        rank_no,
        c.market_id.provider,
        c.market_id.location,
        c.market_id.instance_type,
        f"{c.offering.gpu_count}× {c.offering.gpu}",
        c.market_kind.value,
        f"{c.price_usd_per_hour:.3f}",
        f"{c.preemption_rate_per_h:.3f}",
        f"{f['checkpoint_interval_s'] / 60:.0f}",
        f"{c.goodput:.3f}",
        f"{c.effective_tflops:.0f}",
        f"{c.egress_usd:.2f}",
        f"{c.score:.5f}" if math.isfinite(c.score) else "inf",
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


def _show(spec: JobSpec, ranking: Ranking, chosen: list[Candidate], limit: int) -> None:
    shown = ranking.candidates[:limit]
    console.print(
        table(
            f"{spec.name}: {len(ranking)} candidates from {ranking.offerings} offerings, "
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
    places = ", ".join(f"{c.market_id.slug} ({c.market_kind.value})" for c in chosen)
    zones = len({(c.market_id.provider, c.market_id.location) for c in chosen})
    types = len({(c.market_id.provider, c.market_id.instance_type) for c in chosen})
    console.print(
        f"spread for {spec.node_count} node(s), asked ≥{spec.spread.min_zones} zones and "
        f"≥{spec.spread.min_instance_types} types, got {zones} and {types}: {places}"
    )
    if zones < spec.spread.min_zones or types < spec.spread.min_instance_types:
        note("the market allows no wider spread for these requirements now")
    excluded = {k: v for k, v in ranking.excluded.items() if v}
    if excluded:
        note("excluded: " + ", ".join(f"{k} {v}" for k, v in excluded.items()))


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
    as_json: Annotated[
        bool,
        typer.Option("--json", help="print the ranking, the spread and what was excluded as JSON"),
    ] = False,
) -> None:
    """Rank where a job would run by the expected cost of useful work, and show the spread chosen."""
    spec = load_job(file)
    req = spec.requirements()
    providers = _providers(spec, provider)
    profile, kinds, pools = plan_inputs(spec, reserved_pools({p.name: p for p in providers}))
    profile = replace(
        profile, data_gib=data_gib, data_location=_data_at(data_at, data_gib), horizon_h=horizon_h
    )
    view = gather_market_view(providers, _history)
    ranking = rank(view, req, profile, kinds, reserved=pools)
    ranking.raise_if_empty()
    chosen = spread(
        ranking.candidates,
        spec.node_count,
        spec.spread.min_zones,
        spec.spread.min_instance_types,
    )
    if as_json:
        print_json(
            {
                "job": spec.name,
                "now": view.now,
                "requirements": req.to_dict(),
                "market_kinds": [k.value for k in kinds],
                **ranking.to_dict(limit),
                "spread": [c.to_dict() for c in chosen],
            }
        )
        return
    _show(spec, ranking, chosen, limit)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
