"""The ``spothop`` command: every group registers itself here, one line each."""

from __future__ import annotations

import sys
from functools import cache
from typing import Any

import typer

from spothop import __version__
from spothop.cli import advise as advise_cli
from spothop.cli import agent as agent_cli
from spothop.cli import catalog, ckpt, cloud, db, offers, plan, probe, topo
from spothop.cli import dashboard as dashboard_cli
from spothop.cli import events as events_cli
from spothop.cli import jobs as jobs_cli
from spothop.cli import market as market_cli
from spothop.cli import queue as queue_cli
from spothop.cli import report as report_cli
from spothop.cli import server as server_cli
from spothop.cli import simulate as simulate_cli
from spothop.cli.failures import describe_outside_error
from spothop.cli.output import err_console, error_line
from spothop.errors import EXIT_INTERRUPTED, EXIT_OK, SpothopError

app = typer.Typer(
    name="spothop",
    help="Run GPU batch work on the cheapest reliable spot capacity across clouds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

offers.register(app)
catalog.register(app)
probe.register(app)
topo.register(app)
ckpt.register(app)
queue_cli.register(app)
market_cli.register(app)
cloud.register(app)
agent_cli.register(app)
db.register(app)
simulate_cli.register(app)
jobs_cli.register(app)
plan.register(app)
report_cli.register(app)
events_cli.register(app)
advise_cli.register(app)
dashboard_cli.register(app)
server_cli.register(app)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"spothop {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        help="print the version and exit",
        is_eager=True,
        callback=_print_version,
    ),
) -> None:
    """Run GPU batch work on the cheapest reliable spot capacity across clouds."""


@cache
def _command() -> Any:  # typer's own (vendored) click Command
    """The click command tree of ``app``, built once per process: typer rebuilds it from every
    command's signature on each call (~0.17 s on an idle core, 90% of an in-process
    ``spothop market import`` of one row), which callers that run ``main`` again and again (a
    harness polling a job's state) paid every time. Every command is registered at import, above."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns the exit status (``docs/cli.md``): a command's own, or its error's.

    A :class:`SpothopError` becomes one clear line on stderr and its ``exit_code``;
    an unreachable database or Redis escaping a command becomes one line and
    ``EXIT_UNAVAILABLE``; an OS error on a path becomes one line naming the path;
    a usage error (a bad flag, a missing argument) stays 2. Never a traceback for
    any of these.
    """
    try:
        # Without standalone mode, an Exit(n) comes back as the return value.
        returned = _command().main(args=argv, standalone_mode=False)
    except SpothopError as exc:
        error_line(str(exc))
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted")
        return EXIT_INTERRUPTED
    except typer.TyperException as exc:  # usage errors: a bad flag, a missing argument
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err_console.print(exc.format_message())
        return exc.exit_code
    except Exception as exc:
        outside = describe_outside_error(exc)
        if outside is None:
            raise  # a bug in spothop: the traceback is what its maintainers need
        error_line(outside.message)
        return outside.exit_code
    return returned if isinstance(returned, int) else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
