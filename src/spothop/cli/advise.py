"""``spothop advise FILE`` and ``spothop advise --usage usage.csv``: should this run on spot, and how.

With a job file: the same candidates ``spothop plan`` ranks (spot, on-demand
and any reserved pools), a Monte Carlo over their preemption processes
(:mod:`spothop.observe.advisor`), and a recommendation with why. With
``--usage``: the reserved baseline that minimises total cost for a GPU-usage
curve (:mod:`spothop.observe.usage`). See ``docs/advisor.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spothop.cli.output import console, note, print_json, table
from spothop.errors import ConfigError
from spothop.observe.advisor import DEFAULT_RUNS, DEFAULT_SEED, Advice, advise
from spothop.observe.usage import UsageAdvice, best_baseline, load_usage

DEFAULT_WORK_H = 10.0


def _show(advice: Advice) -> None:
    rows = []
    for o in advice.options:
        c, f = o.cost_microusd, o.finish_s
        rows.append(
            [
                ("→ " if o.name == advice.recommended else "") + o.name,
                f"{c.mean / 1e6:,.2f}",
                f"{c.p10 / 1e6:,.2f}",
                f"{c.p90 / 1e6:,.2f}",
                f"{f.mean / 3600:.2f}",
                f"{f.p10 / 3600:.2f}",
                f"{f.p90 / 3600:.2f}",
                f"{o.interruptions_mean:.2f}",
                o.description,
            ]
        )
    cols = [
        "option",
        "cost $ mean",
        "cost $ p10",
        "cost $ p90",
        "finish h mean",
        "finish h p10",
        "finish h p90",
        "interruptions",
        "how",
    ]
    console.print(
        table(
            f"{advice.nodes} node(s) × {advice.work_h:g} useful h, {advice.runs} simulated runs each",
            cols,
            rows,
            right=cols[1:8],
        )
    )
    console.print(f"recommended: {advice.recommended} — {advice.reason}")
    for line in advice.notes:
        note(line)


def _show_usage(a: UsageAdvice) -> None:
    plans = [a.best, a.all_on_demand, a.all_reserved, *([a.all_peak] if a.all_peak else [])]
    console.print(
        table(
            "reserved baseline for the usage curve",
            ["plan", "reserved GPUs", "total $", "reserved $", "peaks $", "reserved used"],
            [
                [
                    p.name,
                    p.reserved_gpus,
                    f"{p.cost_microusd / 1e6:,.2f}",
                    f"{p.reserved_microusd / 1e6:,.2f}",
                    f"{p.peak_microusd / 1e6:,.2f}",
                    f"{p.utilisation:.0%}",
                ]
                for p in plans
            ],
            right=["reserved GPUs", "total $", "reserved $", "peaks $", "reserved used"],
        )
    )
    saving = a.all_on_demand.cost_microusd - a.best.cost_microusd
    console.print(
        f"recommended: reserve {a.best.reserved_gpus} GPU(s), {a.peak_market} for the peaks — "
        f"${a.best.cost_microusd / 1e6:,.2f}, ${saving / 1e6:,.2f} below all on-demand"
    )


def advise_command(
    file: Annotated[
        Path | None, typer.Argument(help="the job file (YAML); omit with --usage")
    ] = None,
    usage: Annotated[
        Path | None,
        typer.Option("--usage", help="a CSV of time,gpus rows: propose a reserved baseline"),
    ] = None,
    work_h: Annotated[
        float,
        typer.Option("--work-h", min=0.001, help="useful hours of work per node (default 10)"),
    ] = DEFAULT_WORK_H,
    runs: Annotated[
        int, typer.Option("--runs", min=1, max=100_000, help="simulated runs per option")
    ] = DEFAULT_RUNS,
    seed: Annotated[int, typer.Option("--seed", help="the simulation's seed")] = DEFAULT_SEED,
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider", help="ask only these providers (repeatable; default: the job's)"
        ),
    ] = None,
    reserved_price: Annotated[
        float | None,
        typer.Option(
            "--reserved-price",
            min=0,
            help="reserved USD per hour (job file: per instance; --usage: per GPU-hour)",
        ),
    ] = None,
    reserved_count: Annotated[
        int | None,
        typer.Option("--reserved-count", min=0, help="job file: nodes on reserved capacity"),
    ] = None,
    on_demand_price: Annotated[
        float | None,
        typer.Option("--on-demand-price", min=0, help="--usage: on-demand USD per GPU-hour"),
    ] = None,
    spot_price: Annotated[
        float | None,
        typer.Option("--spot-price", min=0, help="--usage: spot USD per GPU-hour for the peaks"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the advice as JSON")] = False,
) -> None:
    """Simulate on-demand, spot at each tolerance and reserved + spot for a job, and recommend one."""
    if usage is not None:
        if file is not None:
            raise ConfigError("give a job file or --usage, not both")
        if reserved_price is None or on_demand_price is None:
            raise ConfigError(
                "--usage needs --reserved-price and --on-demand-price (USD per GPU-hour); "
                "--spot-price is optional (the peaks go on spot at that price)"
            )
        result = best_baseline(
            load_usage(usage),
            reserved_price=reserved_price,
            on_demand_price=on_demand_price,
            spot_price=spot_price,
        )
        if as_json:
            print_json(result.to_dict())
        else:
            _show_usage(result)
        return
    if file is None:
        raise ConfigError("give a job file to advise on, or --usage usage.csv")
    advice = _advise_job(file, provider, work_h, runs, seed, reserved_price, reserved_count)
    if as_json:
        print_json(advice.to_dict())
    else:
        _show(advice)


def _advise_job(
    file: Path,
    provider: list[str] | None,
    work_h: float,
    runs: int,
    seed: int,
    reserved_price: float | None,
    reserved_count: int | None,
) -> Advice:
    from spothop.cli.output import note
    from spothop.jobs.controller.observe import reserved_pools
    from spothop.jobs.controller.place import plan_inputs
    from spothop.jobs.spec import load_job
    from spothop.scheduler.market_view import MarketKind, gather_market_view
    from spothop.scheduler.placement import rank
    from spothop.service.plan import plan_providers, reliability_history

    spec = load_job(file)
    providers = plan_providers(spec, provider, lambda line: note(line, stderr=True))
    profile, kinds, pools = plan_inputs(spec, reserved_pools({p.name: p for p in providers}))
    kinds = tuple(dict.fromkeys((*kinds, MarketKind.SPOT, MarketKind.ON_DEMAND)))
    view = gather_market_view(providers, reliability_history)
    ranking = rank(view, spec.requirements(), profile, kinds, reserved=pools)
    ranking.raise_if_empty()
    return advise(
        list(ranking.candidates[:200]),
        work_h=work_h,
        nodes=spec.node_count,
        deadline_s=spec.deadline_s,
        runs=runs,
        seed=seed,
        reserved_usd_per_hour=reserved_price,
        reserved_count=reserved_count,
    )


def register(app: typer.Typer) -> None:
    app.command("advise")(advise_command)
