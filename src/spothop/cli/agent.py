"""``spothop agent run [OPTIONS] -- CMD...``: the on-instance agent.

The command execs ``python -m spothop.agent run`` with the options given, so
the process that stays resident on the instance is the light agent (standard
library only), not the whole command line. Its options are built from the
light agent's own table (:data:`spothop.agent.options.OPTIONS`), so
``--help`` documents each one and each is passed through as given; defaults
are left to the light agent, which reads them from the environment the
cloud gives. The token goes to the light agent in its environment, not argv.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from spothop.agent.options import OPTIONS, Option, pass_through

agent_app = typer.Typer(
    help="The on-instance spot agent: notices, worker supervision, the emergency protocol.",
    no_args_is_help=True,
)

_COMMAND = "command"


def run_command(**values: Any) -> None:
    """Supervise CMD; on an interruption notice stop it, release its leases, record it, exit 75."""
    argv, env = pass_through(values)
    command = values.get(_COMMAND) or []
    os.execve(
        sys.executable,
        [sys.executable, "-m", "spothop.agent", "run", *argv, "--", *command],
        {**os.environ, **env},
    )


def _parameter(option: Option) -> inspect.Parameter:
    kind: Any = option.type if option.type in (bool, int, float, Path) else str
    info = typer.Option(option.flag, help=option.help, metavar=option.metavar, show_default=False)
    annotation: Any = Annotated[bool, info] if kind is bool else Annotated[kind | None, info]
    return inspect.Parameter(
        option.dest,
        inspect.Parameter.KEYWORD_ONLY,
        annotation=annotation,
        default=False if kind is bool else None,
    )


def _signature() -> inspect.Signature:
    command = inspect.Parameter(
        _COMMAND,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            list[str] | None,
            typer.Argument(
                help="the worker command and its arguments (after --)", metavar="-- CMD..."
            ),
        ],
    )
    return inspect.Signature([command, *(_parameter(o) for o in OPTIONS)])


# typer reads a command's options from its signature: give it the table's.
run_command.__signature__ = _signature()  # type: ignore[attr-defined]
_parameters = run_command.__signature__.parameters.values()  # type: ignore[attr-defined]
run_command.__annotations__ = {p.name: p.annotation for p in _parameters}
agent_app.command("run", context_settings={"allow_interspersed_args": False})(run_command)


def register(app: typer.Typer) -> None:
    app.add_typer(agent_app, name="agent")
