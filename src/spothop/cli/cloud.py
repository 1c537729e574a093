"""``spothop cloud``: the embedded local cloud — its world, and instances you can launch and preempt."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from spothop.bounds import DURATION_S, LEAD_TIME_S, PRICE_USD_PER_HOUR
from spothop.cli.output import console, money, note, print_json, table
from spothop.errors import ConfigError
from spothop.providers.base import MICROUSD_PER_USD, Instance, LaunchRequest
from spothop.providers.local.maintenance import DEFAULT_WINDOW_S
from spothop.providers.local.metadata import PROTOCOLS
from spothop.providers.local.provider import LocalProvider
from spothop.providers.local.runtime import stored_anchor
from spothop.providers.local.store import CloudStore
from spothop.providers.local.world import World, load_world
from spothop.providers.local.world_view import world_view

cloud_app = typer.Typer(
    help="The embedded local cloud: simulated clouds whose instances are real processes.",
    no_args_is_help=True,
)

WorldOption = Annotated[
    Path | None,
    typer.Option(
        "--world", envvar="SPOTHOP_WORLD", help="world file (default: the built-in world)"
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
_MAINTENANCE_CODES = "; ".join(
    f"{name}: {', '.join(sorted(h.MAINTENANCE_CODES))}"
    for name, h in PROTOCOLS.items()
    if h.MAINTENANCE_CODES
)


def _providers(world: World, world_path: Path | None) -> dict[str, LocalProvider]:
    store = CloudStore()
    return {
        name: LocalProvider(name, world=world, world_path=world_path, store=store)
        for name in world.cloud_names
    }


@cloud_app.command("world")
def world_command(world_path: WorldOption = None, as_json: JsonOption = False) -> None:
    """Show the world: each simulated cloud, its protocol and notice, and its markets right now."""
    world = load_world(world_path)
    providers = _providers(world, world_path)
    anchor = stored_anchor(next(iter(providers.values())).store)
    if anchor is not None and anchor.speed != world.speed:
        # Showing never re-anchors the shared clock (only a launch does): say so, since the speeds differ.
        note(
            f"the local cloud's clock runs at speed {anchor.speed:g} (anchored by {anchor.world or 'a world'}); "
            f"shown at this world's speed {world.speed:g} from the same instant, the clock left as it is",
            stderr=True,
        )
    view = world_view(world, providers)
    if as_json:
        print_json(view.to_dict())
        return
    columns = [
        "cloud",
        "protocol",
        "notice",
        "location",
        "instance type",
        "GPUs",
        "spot now",
        "$/h spot",
        "$/h OD",
    ]
    console.print(
        table(
            f"{view.origin}: {view.clouds} clouds, seed {view.seed}, {view.speed:g}× time",
            columns,
            [
                [
                    m.provider,
                    m.protocol,
                    f"{m.notice_lead_time_s:g} s",
                    m.zone or m.region,
                    m.instance_type,
                    m.gpu,
                    "yes" if m.available else "NO",
                    money(m.spot_usd_per_hour),
                    money(m.on_demand_usd_per_hour),
                ]
                for m in view.markets
            ],
            right=["notice", "$/h spot", "$/h OD"],
        )
    )
    if view.storms:
        console.print(
            table(
                "storms: capacity crunches, from the first launch",
                ["cloud", "locations", "instance types", "from", "for", "markets", "now"],
                [
                    [
                        s.cloud,
                        ", ".join(s.locations) if s.locations else "all",
                        ", ".join(s.instance_types) if s.instance_types else "all",
                        f"{s.at_s:g} s",
                        f"{s.duration_s:g} s",
                        str(s.markets),
                        s.state,
                    ]
                    for s in view.storms
                ],
                right=["from", "for", "markets"],
            )
        )


@cloud_app.command("launch")
def launch(
    cloud: Annotated[
        str, typer.Argument(help="a cloud of the world (`spothop cloud world` lists them)")
    ],
    instance_type: Annotated[str, typer.Argument(help="instance type, as the cloud spells it")],
    location: Annotated[str, typer.Argument(help="zone (or region, for region-priced clouds)")],
    command: Annotated[
        str, typer.Option("--command", help="bootstrap command (default: idle until terminated)")
    ] = "",
    on_demand: Annotated[
        bool, typer.Option("--on-demand", help="launch on-demand instead of spot")
    ] = False,
    max_price: Annotated[
        float | None,
        typer.Option(
            "--max-price",
            help="spot bid, USD per instance-hour",
            callback=PRICE_USD_PER_HOUR.option_callback("--max-price"),
        ),
    ] = None,
    world_path: WorldOption = None,
    as_json: JsonOption = False,
) -> None:
    """Launch one instance; prints its id and metadata endpoint."""
    world = load_world(world_path)
    provider = LocalProvider(world.cloud(cloud).name, world=world, world_path=world_path)
    offering = world.offering(cloud, location, instance_type)
    region = offering.region if offering else location
    zone = offering.zone if offering else None
    instance = provider.launch(
        LaunchRequest(
            instance_type=instance_type,
            region=region,
            zone=zone,
            spot=not on_demand,
            bootstrap_command=shlex.split(command),
            max_price_usd_per_hour=max_price,
        )
    )
    _show([instance], as_json)


@cloud_app.command("ls")
def ls(
    world_path: WorldOption = None,
    show_all: Annotated[bool, typer.Option("--all", help="include ended instances")] = False,
    as_json: JsonOption = False,
) -> None:
    """List instances with their state, notice, billed time and cost."""
    world = load_world(world_path)
    found = [
        i
        for p in _providers(world, world_path).values()
        for i in p.list_instances()
        if show_all or i.state.is_alive
    ]
    _show(found, as_json)


@cloud_app.command("terminate")
def terminate(
    instance_ids: Annotated[list[str], typer.Argument(help="instance ids")],
    world_path: WorldOption = None,
) -> None:
    """Terminate instances (an unknown or ended id is a no-op, as clouds do)."""
    world = load_world(world_path)
    providers = _providers(world, world_path)
    for instance_id in instance_ids:
        for provider in providers.values():
            provider.terminate(instance_id)
        console.print(f"terminating {instance_id}")


@cloud_app.command("preempt")
def preempt(
    instance_id: Annotated[str, typer.Argument(help="instance id")],
    lead_time: Annotated[
        float | None,
        typer.Option(
            "--lead-time",
            help="seconds from notice to reclaim (default: the cloud's)",
            callback=LEAD_TIME_S.option_callback("--lead-time"),
        ),
    ] = None,
    advance: Annotated[
        float | None,
        typer.Option(
            "--advance",
            help="give the cloud's advance notice (a rebalance recommendation) now and the final notice this many seconds later",
            callback=LEAD_TIME_S.option_callback("--advance"),
        ),
    ] = None,
    world_path: WorldOption = None,
    as_json: JsonOption = False,
) -> None:
    """Inject an interruption: the notice now (or after --advance), SIGKILL of the instance's processes after the lead time."""
    provider = _provider_of(instance_id, world_path)
    _show([provider.preempt(instance_id, lead_time, advance)], as_json)


@cloud_app.command("maintenance")
def maintenance_command(
    instance_id: Annotated[str, typer.Argument(help="instance id")],
    code: Annotated[
        str | None,
        typer.Option(
            "--code",
            help=f"event to schedule, as the cloud's protocol spells it ({_MAINTENANCE_CODES})",
        ),
    ] = None,
    in_s: Annotated[
        float,
        typer.Option(
            "--in",
            help="seconds from now (the cloud's clock) to the event's NotBefore",
            callback=DURATION_S.option_callback("--in"),
        ),
    ] = 0.0,
    window: Annotated[
        float,
        typer.Option(
            "--window",
            help="seconds from NotBefore to NotAfter",
            callback=DURATION_S.option_callback("--window"),
        ),
    ] = DEFAULT_WINDOW_S,
    description: Annotated[
        str,
        typer.Option(
            "--description", help="the event's description (default: the cloud's wording)"
        ),
    ] = "",
    cancel: Annotated[
        str | None,
        typer.Option("--cancel", help="cancel this active event id ('all': every active one)"),
    ] = None,
    world_path: WorldOption = None,
    as_json: JsonOption = False,
) -> None:
    """Schedule (--code), cancel (--cancel) or list an instance's maintenance events.

    The instance's metadata endpoint shows the event at once (for example on
    events/maintenance/scheduled), so its agent gets an advance notice; at
    NotBefore a stop or a retirement shuts the instance down.
    """
    if code is not None and cancel is not None:
        raise ConfigError("give --code (schedule) or --cancel, not both")
    provider = _provider_of(instance_id, world_path)
    if code is not None:
        provider.schedule_maintenance(instance_id, code, in_s, window, description)
        events = provider.maintenance_events(instance_id)
    elif cancel is not None:
        events = provider.cancel_maintenance(instance_id, None if cancel == "all" else cancel)
    else:
        events = provider.maintenance_events(instance_id)
    if as_json:
        print_json([e.to_dict() for e in events])
        return
    if not events:
        console.print(f"No scheduled events on {instance_id}.")
        return
    now = provider.clock.now()
    console.print(
        table(
            f"{instance_id}: scheduled events",
            ["event id", "code", "state", "starts in", "window", "description"],
            [
                [
                    e.event_id,
                    e.code,
                    e.state,
                    f"{e.not_before - now:,.0f} s",
                    f"{e.not_after - e.not_before:,.0f} s",
                    e.description,
                ]
                for e in events
            ],
            right=["starts in", "window"],
        )
    )


def _provider_of(instance_id: str, world_path: Path | None) -> LocalProvider:
    """The provider of the world's cloud that launched ``instance_id`` (the first one for an unknown id)."""
    world = load_world(world_path)
    providers = _providers(world, world_path)
    row = CloudStore().instance(instance_id)
    provider = providers.get(row["cloud"]) if row else None
    return provider if provider is not None else next(iter(providers.values()))


def _show(found: list[Instance], as_json: bool) -> None:
    if as_json:
        print_json([i.to_dict() for i in found])
        return
    if not found:
        console.print("No instances.")
        return
    columns = [
        "id",
        "cloud",
        "location",
        "type",
        "market",
        "state",
        "billed s",
        "cost $",
        "notice → reclaim",
        "metadata",
    ]
    rows = [
        [
            i.instance_id,
            i.provider,
            i.zone or i.region,
            i.instance_type,
            i.market,
            i.state.value,
            f"{i.billed_seconds:,.0f}",
            money(i.cost_microusd / MICROUSD_PER_USD, 6),
            f"{i.termination_time - i.notice_time:g} s"
            if i.notice_time is not None and i.termination_time is not None
            else None,
            i.metadata_url,
        ]
        for i in found
    ]
    console.print(table(None, columns, rows, right=["billed s", "cost $"]))


def register(app: typer.Typer) -> None:
    app.add_typer(cloud_app, name="cloud")
