"""``spothop dashboard [--port N]``: the web page over this home's jobs (docs/dashboard.md).

Serves :mod:`spothop.dashboard` on 127.0.0.1 (``--host`` to listen wider) with
the standard library's ThreadingHTTPServer until Ctrl-C: jobs with progress,
the live event stream, cost against on-demand, the market reliability table,
each job's timeline, and Prometheus ``/metrics``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from spothop.cli.jobs import QueueOption, StoreOption
from spothop.cli.output import console
from spothop.dashboard.app import DEFAULT_PORT
from spothop.errors import ConfigError


def dashboard(
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help=f"port (default {DEFAULT_PORT}; 0: any)")
    ] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="address to listen on")] = "127.0.0.1",
    store_url: StoreOption = None,
    queue_url: QueueOption = None,
) -> None:
    """Serve the dashboard (jobs, live events, cost vs on-demand, markets, timelines, /metrics)."""
    from spothop.dashboard.app import Dashboard, plotly_js
    from spothop.db import default_database_url
    from spothop.jobs.store import JobStore
    from spothop.providers.registry import default_providers

    plotly_js()  # the charts' library must be there before the page is promised
    url = store_url or default_database_url()
    app = Dashboard(JobStore(url), queue_url=queue_url or url, providers=default_providers())
    try:
        server = app.make_server(host, port)
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (pick another --port)"
        ) from None
    console.print(
        f"spothop dashboard on http://{host}:{server.server_address[1]}/ (Ctrl-C stops it)"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        app.stop()


def register(app: typer.Typer) -> None:
    app.command("dashboard")(dashboard)
