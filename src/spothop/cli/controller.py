"""``spothop controller run | status | stop``: this home's controller, the process that runs every job.

``run`` runs it in the foreground (``spothop launch`` starts it in the background), alone
behind the home's lock or, with ``--replica``, as one of several sharing the store's jobs
through leases (docs/controller.md); the front wires the ledger's books and ``/metrics`` in.
"""

from __future__ import annotations

from typing import Annotated

import typer

from spothop.cli.jobs import JsonOption, QueueOption, StoreOption
from spothop.cli.output import console, note, print_json

controller_app = typer.Typer(
    help="This home's controller: the background process that runs every job.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(controller_app, name="controller")


# -- the controller -------------------------------------------------------------------


@controller_app.command("run")
def controller_run(
    store_url: StoreOption = None,
    queue_url: QueueOption = None,
    period: Annotated[
        float | None,
        typer.Option(
            "--period", min=0.05, max=3600, help="seconds between passes with no event (default 10)"
        ),
    ] = None,
    poll_only: Annotated[
        bool,
        typer.Option("--poll-only", help="ignore wake-ups: pass every --period only (benchmarks)"),
    ] = False,
    providers: Annotated[
        str | None,
        typer.Option("--providers", help="comma-separated provider names (default: all)"),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=1, max=65535, help="serve Prometheus /metrics here"),
    ] = None,
    replica: Annotated[
        bool,
        typer.Option(
            "--replica",
            help="run as one of several controllers sharing the store's jobs through leases "
            "(PostgreSQL; no home lock): see docs/controller.md, Replicas",
        ),
    ] = False,
    replica_id: Annotated[
        str | None,
        typer.Option(
            "--replica-id", help="this replica's name in the leases (default hostname-pid)"
        ),
    ] = None,
    lease_s: Annotated[
        float,
        typer.Option(
            "--lease-s",
            min=0.5,
            max=3600,
            help="a replica's job leases, seconds (renewed every third)",
        ),
    ] = 15.0,
    control_plane_url: Annotated[
        str | None,
        typer.Option(
            "--control-plane-url",
            help="a replica's agents talk to this spothop server (http[s]://…), each with a "
            "token of its own (default: the home's agent API, started if none runs)",
        ),
    ] = None,
    agent_port: Annotated[
        int | None,
        typer.Option(
            "--agent-port",
            min=1,
            max=65535,
            help="the home's agent API (a process of its own, which outlives the controller) "
            "listens on 127.0.0.1 at this port (default: its previous port, else a free one); "
            "the URL is in controller.json (control_plane_url)",
        ),
    ] = None,
) -> int:
    """Run the controller in the foreground (what `spothop launch` starts in the background)."""
    import os

    from spothop.jobs.controller import daemon
    from spothop.paths import PRIVATE_UMASK

    # Everything it writes in the home (logs, the wheel, the local cloud's instances and their
    # disks, which hold the jobs' envs) is its user's only, however it was started.
    os.umask(PRIVATE_UMASK)
    from spothop.controlplane.prune import DailyCodePrune
    from spothop.observe.ledger import close_books
    from spothop.observe.metrics import serve
    from spothop.paths import spothop_home
    from spothop.server.agent_process import ensure_agent_api

    # The front wires observability in: the ledger's books after every pass, and /metrics.

    names = tuple(p.strip() for p in providers.split(",") if p.strip()) if providers else ()
    if replica:
        return _run_replica(
            store_url, queue_url, period, names, replica_id, lease_s, control_plane_url
        )
    return daemon.run_controller(
        store_url=store_url,
        queue_url=queue_url,
        period_s=period,
        poll_only=poll_only,
        providers=names,
        metrics_port=metrics_port,
        after_pass=(close_books, DailyCodePrune(spothop_home())),
        serve_metrics=serve,
        serve_agents=ensure_agent_api,
        agent_port=agent_port,
    )


def _run_replica(
    store_url: str | None,
    queue_url: str | None,
    period: float | None,
    names: tuple[str, ...],
    replica_id: str | None,
    lease_s: float,
    control_plane_url: str | None = None,
) -> int:
    """``controller run --replica``: :func:`spothop.jobs.controller.replica.run_replica` until SIGTERM."""
    import logging
    import signal
    import threading

    from spothop.controlplane.dist import distribution_for
    from spothop.controlplane.prune import DailyCodePrune
    from spothop.db import default_database_url
    from spothop.jobs.controller.replica import DEFAULT_PERIOD_S, run_replica
    from spothop.observe.ledger import close_books
    from spothop.paths import spothop_home

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    store_url = store_url or default_database_url()
    distribution = None
    if control_plane_url:  # the server there serves this spothop's wheel (its /v1/dist/…)
        distribution = distribution_for(control_plane_url, spothop_home())
    else:
        # Alone, the replica's instances talk to the home's agent API (as the embedded
        # controller's do; it outlives this replica): an instance sees nothing of this machine
        # but the network, so neither the store's database nor this spothop is theirs without it.
        from spothop.server.agent_process import ensure_agent_api

        agents = ensure_agent_api(spothop_home(), None, store_url, queue_url or store_url)
        control_plane_url, distribution = agents.url, agents.distribution
    try:
        run_replica(
            store_url,
            owner=replica_id,
            lease_s=lease_s,
            providers=names,
            stop_event=stop,
            after_pass=(close_books, DailyCodePrune(spothop_home())),
            queue_url=queue_url,
            period_s=period or DEFAULT_PERIOD_S,
            control_plane_url=control_plane_url,
            distribution=distribution,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


@controller_app.command("status")
def controller_status(as_json: JsonOption = False) -> None:
    """Whether this home's controller runs, and which (pid, store, log); its agent API (url, pid)."""
    from spothop.jobs.controller import daemon

    info = daemon.status()
    agents = daemon.agent_api_status()
    if as_json:
        print_json(
            {
                "running": info is not None,
                **(info.to_dict() if info else {}),
                "agent_api": agents.to_dict() if agents else None,
            }
        )
        return
    if info is None:
        note("no controller runs for this home (spothop launch starts one)")
    else:
        console.print(f"controller pid {info.pid}, store {info.store_url}, log {info.log}")
    if agents is not None:
        console.print(f"agent API {agents.url}, pid {agents.pid}")


@controller_app.command("stop")
def controller_stop(as_json: JsonOption = False) -> None:
    """Stop this home's controller, then its agent API; jobs and instances go on, the next
    controller adopts them."""
    from spothop.jobs.controller import daemon

    agents = daemon.agent_api_status()
    info = daemon.stop()
    if as_json:
        print_json(
            {
                "stopped": info is not None,
                **(info.to_dict() if info else {}),
                "agent_api": agents.to_dict() if agents else None,
            }
        )
        return
    if info is None:
        note("no controller runs for this home")
    else:
        console.print(f"stopped the controller (pid {info.pid}); its jobs go on")
    if agents is not None:
        console.print(f"stopped the agent API {agents.url} (pid {agents.pid})")
