"""The ``spothop`` command: every group registers itself here, one line each."""

from __future__ import annotations

import sys

import typer

from spothop import __version__
from spothop.cli import agent as agent_cli
from spothop.cli import catalog, ckpt, cloud, offers, probe, topo
from spothop.cli import market as market_cli
from spothop.cli import queue as queue_cli
from spothop.cli.output import err_console
from spothop.errors import SpothopError

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


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"spothop {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="print the version and exit", is_eager=True, callback=_print_version
    ),
) -> None:
    """Run GPU batch work on the cheapest reliable spot capacity across clouds."""


EXIT_USER_ERROR = 2


def main(argv: list[str] | None = None) -> int:
    """Entry point: a :class:`SpothopError` becomes one clear line on stderr, exit status 2."""
    try:
        # Without standalone mode, an Exit(n) comes back as the return value.
        returned = app(args=argv, standalone_mode=False)
    except SpothopError as exc:
        err_console.print(f"[bold red]error:[/bold red] {exc}", highlight=False)
        return EXIT_USER_ERROR
    except typer.Exit as exc:
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("aborted")
        return 130
    except typer.TyperException as exc:  # usage errors: a bad flag, a missing argument
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            err_console.print(exc.format_message(), highlight=False)
        return exc.exit_code
    return returned if isinstance(returned, int) else 0


if __name__ == "__main__":
    sys.exit(main())
