"""``spothop offers`` and ``spothop gpus``: what can be rented, where, at what price per unit of compute."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from spothop.cli.catalog import warn_refused
from spothop.cli.output import console, money, note, print_json, table
from spothop.cli.remote import ServerOption, TokenOption, connect
from spothop.errors import ConfigError
from spothop.resources.catalog import OfferQuery, SortKey, load_catalog
from spothop.resources.compat import CompatNeed, compat_matrix
from spothop.resources.gpus import GpuModel, gpu_catalog, match_gpus
from spothop.resources.offering import DEFAULT_EFFICIENCY, Offering
from spothop.service.offers import find_offers, offer_query_params


def offers(
    gpu: Annotated[
        str | None,
        typer.Option("--gpu", help="GPU name, alias or family (H100, nvidia-tesla-v100, A10G)"),
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", help="exact number of GPUs per instance")
    ] = None,
    min_gpu_memory: Annotated[
        float | None, typer.Option("--min-gpu-memory", help="GiB of memory per GPU, at least")
    ] = None,
    min_tflops: Annotated[
        float | None, typer.Option("--min-tflops", help="effective TFLOPS per GPU, at least")
    ] = None,
    interconnect: Annotated[
        str | None, typer.Option("--interconnect", help="nvswitch, nvlink, xgmi, pcie or none")
    ] = None,
    provider: Annotated[
        list[str] | None, typer.Option("--provider", help="only these providers (repeatable)")
    ] = None,
    region: Annotated[
        list[str] | None, typer.Option("--region", help="only these regions (repeatable)")
    ] = None,
    spot: Annotated[
        bool, typer.Option("--spot/--on-demand", help="which market's prices to filter and sort by")
    ] = True,
    max_price: Annotated[
        float | None, typer.Option("--max-price", help="USD per GPU-hour, at most")
    ] = None,
    sort: Annotated[
        str,
        typer.Option(
            "--sort", help="price (USD per GPU-hour) or tflops (USD per effective TFLOPS-hour)"
        ),
    ] = SortKey.GPU_HOUR,
    limit: Annotated[
        int | None, typer.Option("--limit", help="show at most this many rows")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print a JSON array of offerings")
    ] = False,
    server: ServerOption = None,
    token: TokenOption = None,
) -> None:
    """List offerings matching the filters, cheapest first."""
    if gpu is not None and not gpu.strip():  # an empty --gpu would silently mean "any GPU"
        raise ConfigError(
            "--gpu is empty: give a GPU name, alias or family (`spothop gpus` lists them), or drop it"
        )
    query = OfferQuery(
        gpu=gpu,
        count=count,
        min_gpu_memory_gib=min_gpu_memory,
        min_tflops=min_tflops,
        interconnect=interconnect,
        providers=tuple(provider or ()),
        regions=tuple(region or ()),
        spot=spot,
        max_usd_per_gpu_hour=max_price,
        sort=sort,
        limit=limit,
    )
    client = connect(server, token)
    if client is not None:
        data = client.offers(offer_query_params(query))
        found = [Offering.model_validate(_fields(d)) for d in data]
    else:
        catalog = load_catalog()
        warn_refused(catalog)
        listed = find_offers(query, catalog)
        found = list(listed.offerings)
        data = listed.to_list()
    if as_json:
        print_json(data)
        return
    market = "spot" if spot else "on-demand"
    if not found:
        # an empty list is an answer, as with --json: exit 0 (docs/cli.md)
        console.print(f"No {market} offerings match. Loosen a filter, or try --on-demand.")
        return
    rows = [_row(o, spot) for o in found]
    columns = [
        "provider",
        "location",
        "instance type",
        "GPUs",
        "GiB/GPU",
        "link",
        "$/h",
        "$/GPU-h",
        "$/eff-TFLOPS-h",
        "vs OD",
    ]
    noun = "offering" if len(found) == 1 else "offerings"
    console.print(
        table(
            f"{len(found)} {market} {noun}, by {'USD per GPU-hour' if sort == SortKey.GPU_HOUR else 'USD per effective TFLOPS-hour'}",
            columns,
            rows,
            right=columns[3:5] + columns[6:],
        )
    )
    note(
        f"Effective TFLOPS: probe-measured where marked *, else nominal dense BF16 × {DEFAULT_EFFICIENCY:.2f}."
    )


def _fields(data: dict[str, Any]) -> dict[str, Any]:
    """An offering's own fields of its ``to_dict`` (without the market and the derived figures)."""
    return {k: v for k, v in data.items() if k in Offering.model_fields}


def _row(o: Offering, spot: bool) -> list[Any]:
    od = o.on_demand_price_usd_per_hour
    price = o.price_usd_per_hour(spot)
    saving = f"{100 * (1 - price / od):.0f}% off" if spot and od and price else None
    measured = "*" if o.measured_tflops_per_gpu is not None else ""
    return [
        o.provider,
        o.location,
        o.instance_type,
        f"{o.gpu_count}× {o.gpu}",
        f"{o.gpu_memory_gib:g}",
        o.interconnect.value,
        money(price, 2),
        money(o.usd_per_gpu_hour(spot)),
        f"{o.usd_per_effective_tflops_hour(spot) or 0:.5f}{measured}",
        saving,
    ]


def gpus(
    query: Annotated[
        str | None, typer.Argument(help="a name, alias or family; all models if omitted")
    ] = None,
    compatible_with: Annotated[
        str | None,
        typer.Option(
            "--compatible-with",
            help="a GPU a checkpoint was made on: show which models it may move to, and why not",
        ),
    ] = None,
    min_architecture: Annotated[
        str | None,
        typer.Option(
            "--min-architecture", help="with --compatible-with: the oldest family the job accepts"
        ),
    ] = None,
    min_compute_capability: Annotated[
        str | None,
        typer.Option("--min-compute-capability", help="with --compatible-with: e.g. 8.0 (CUDA)"),
    ] = None,
    state_memory_gib: Annotated[
        float | None,
        typer.Option(
            "--state-memory-gib", help="with --compatible-with: GiB of state per GPU, at least"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List known GPU models with their published figures and aliases.

    With --compatible-with, the hardware compatibility matrix instead: for each
    model, whether a checkpoint made on that GPU may be restored there, and the
    reason for each refusal.
    """
    models = match_gpus(query) if query else list(gpu_catalog())
    if compatible_with is not None:
        need = CompatNeed(min_architecture, min_compute_capability, state_memory_gib)
        _compat_table(compatible_with, need, models, as_json)
        return
    if (min_architecture, min_compute_capability, state_memory_gib) != (None, None, None):
        raise ConfigError(
            "--min-architecture, --min-compute-capability and --state-memory-gib describe a "
            "checkpoint's needs: give them with --compatible-with GPU"
        )
    if as_json:
        print_json([m.to_dict() for m in models])
        return
    columns = [
        "model",
        "family",
        "arch",
        "memory",
        "GB/s",
        "FP32",
        "BF16",
        "FP8",
        "NVLink GB/s",
        "aliases",
    ]
    rows = [
        [
            m.name,
            m.family,
            m.architecture,
            f"{m.memory_gib:g} GiB {m.memory_type.value}",
            f"{m.memory_bandwidth_gbps:,.0f}",
            f"{m.fp32_tflops:g}",
            m.bf16_tflops,
            m.fp8_tflops,
            m.nvlink_bandwidth_gbps,
            ", ".join(m.aliases[:4]),
        ]
        for m in models
    ]
    console.print(
        table(f"{len(models)} GPU models (dense TFLOPS)", columns, rows, right=columns[3:9])
    )


def _compat_table(source: str, need: CompatNeed, models: list[GpuModel], as_json: bool) -> None:
    found = compat_matrix().table(source, need, models)
    if as_json:
        print_json(found.to_dict())
        return
    columns = ["model", "arch", "CC", "memory", "verdict", "reason"]
    rows = [
        [
            m.name,
            m.architecture,
            m.compute_capability or "-",
            f"{m.memory_gib:g} GiB",
            "ok" if v.ok else "refused",
            "; ".join(r.split(": ", 1)[1] for r in v.reasons),
        ]
        for m, v in found.rows
    ]
    title = (
        f"a checkpoint made on {found.source.name} may move to "
        f"{found.accepted} of {len(found.rows)} GPU models"
    )
    console.print(table(title, columns, rows, right=["memory"]))


def register(app: typer.Typer) -> None:
    app.command("offers")(offers)
    app.command("gpus")(gpus)
