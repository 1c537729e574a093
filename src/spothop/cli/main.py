"""The ``spothop`` command: every command is named here, one line each, and imported when it runs."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from functools import cache
from typing import Any

import typer
from typer.core import TyperGroup

from spothop import __version__
from spothop.cli.failures import describe_outside_error
from spothop.cli.output import err_console, error_line
from spothop.errors import EXIT_INTERRUPTED, EXIT_OK, SpothopError

# Every top-level command and the module of spothop.cli whose ``register(app)`` adds it, in the
# order ``spothop --help`` lists them (typer's: the plain commands, then the groups). A command's
# module is imported when that command runs, not before: ``spothop controller run`` (what every
# launch starts) and ``spothop status`` skip the advisor, the dashboard and the other groups'
# imports (~0.5 s of CPU a process). tests/cli/test_lazy_commands.py checks this table against
# what the modules register.
COMMANDS: dict[str, str] = {
    "offers": "offers",
    "gpus": "offers",
    "probe": "probe",
    "simulate": "simulate",
    "launch": "jobs",
    "status": "jobs",
    "jobs": "jobs",
    "logs": "jobs",
    "cancel": "jobs",
    "plan": "plan",
    "report": "report",
    "events": "events",
    "advise": "advise",
    "dashboard": "dashboard",
    "catalog": "catalog",
    "topo": "topo",
    "ckpt": "ckpt",
    "queue": "queue",
    "market": "market",
    "cloud": "cloud",
    "agent": "agent",
    "db": "db",
    "controller": "controller",
    "server": "server",
}


def _register(app: typer.Typer, module: str) -> None:
    importlib.import_module(f"spothop.cli.{module}").register(app)


@cache
def _commands_of(module: str) -> dict[str, Any]:  # name -> typer's click Command
    """The click commands that ``spothop.cli.<module>``'s ``register`` adds, built once."""
    group = typer.Typer()
    _register(group, module)
    return dict(typer.main.get_group(group).commands)


class _LazyCommands(MutableMapping[str, Any]):
    """The root group's commands: :data:`COMMANDS`' names, each built on first lookup."""

    def __init__(self) -> None:
        self._added: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name in self._added:
            return self._added[name]
        module = COMMANDS.get(name)
        if module is None:
            raise KeyError(name)
        return _commands_of(module)[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._added[name] = command

    def __delitem__(self, name: str) -> None:
        del self._added[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (n for n in self._added if n not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + len(set(self._added) - set(COMMANDS))


class _LazyGroup(TyperGroup):
    """typer's root group, its subcommands imported when named (a help lists them all)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.commands = _LazyCommands()


app = typer.Typer(
    name="spothop",
    help="Run GPU batch work on the cheapest reliable spot capacity across clouds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
)


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
    harness polling a job's state) paid every time. Each command's module is registered when
    the command is first named (:data:`COMMANDS`)."""
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
