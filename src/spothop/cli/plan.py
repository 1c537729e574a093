"""``spothop plan FILE``: where a job would run, and why — every factor of every candidate's score.

Loads the job file, asks the providers for offerings and live spot prices
(``--provider``, else the job's ``providers.allow``, else the controller's
own: the local world's clouds and the real ones in ``$SPOTHOP_PROVIDERS``), takes λ from spothop's own interruption history when the store has any
(priors otherwise), ranks with :func:`spothop.scheduler.rank` and shows the
spread :func:`spothop.scheduler.spread` would choose for the job's nodes or
workers: :func:`spothop.service.plan.plan_request` builds the answer, here or on
``spothop server``. Nothing is launched, and spothop's own store is only read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from spothop.cli.job_file import (
    EnvOption,
    ExplainOption,
    SecretOption,
    env_overrides,
    secret_overrides,
    show_dialect,
)
from spothop.cli.output import console, note, print_json, table
from spothop.cli.remote import ServerOption, TokenOption, connect
from spothop.jobs.spec import load_job
from spothop.scheduler.placement import DEFAULT_HORIZON_H
from spothop.service.plan import DEFAULT_LIMIT, PlanRequest, data_location, plan_request


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
    order = (
        "your choices in order (resources.ordered), the cheapest useful work first within each"
        if (data.get("requirements") or {}).get("ordered")
        else "best (cheapest useful work) first"
    )
    console.print(
        table(
            f"{data['job']}: {data['candidate_count']} candidates from {data['offerings']} offerings, "
            + order,
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
    env: EnvOption = None,
    secret: SecretOption = None,
    explain: ExplainOption = False,
) -> None:
    """Rank where a job would run by the expected cost of useful work, and show the spread chosen."""
    spec = load_job(file, env=env_overrides(env), secrets=secret_overrides(secret))
    show_dialect(file, spec, explain, stderr=as_json)
    data_location(data_at, data_gib)  # a bad --data-at is this machine's error, server or not
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
        request = PlanRequest(
            spec,
            tuple(provider or ()),
            limit=limit,
            data_gib=data_gib,
            data_at=data_at,
            horizon_h=horizon_h,
            checkpoint_gpu=checkpoint_gpu,
        )
        data = plan_request(request, lambda line: note(line, stderr=True)).to_dict()
    if as_json:
        print_json(data)
        return
    _show(data, limit)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
