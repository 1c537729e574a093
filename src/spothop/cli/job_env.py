"""``--env NAME=VALUE`` of ``spothop launch`` and ``plan``: values for a job file's ``envs``.

As SkyPilot's ``--env``: it takes precedence over the file's ``envs`` and fills the values a
file leaves for the user (``HF_TOKEN:`` with no value); ``--env NAME`` alone passes the
value of ``NAME`` in this shell's environment.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

import typer

from spothop.errors import ConfigError

EnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        help="NAME=VALUE for the job's envs (repeatable; over the file's, filling the values it "
        "leaves for you); --env NAME passes this shell's value",
    ),
]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_overrides(values: list[str] | None) -> dict[str, str]:
    """The ``--env`` values as NAME → VALUE; :class:`ConfigError` for a bad name or a bare
    NAME this shell does not set."""
    out: dict[str, str] = {}
    for item in values or ():
        name, equals, value = item.partition("=")
        if not _NAME.fullmatch(name):
            raise ConfigError(
                f"--env {item!r:.80}: write NAME=VALUE, NAME being letters, digits and _"
            )
        if not equals:
            if name not in os.environ:
                raise ConfigError(
                    f"--env {name}: not set in this shell; give its value: --env {name}=VALUE"
                )
            value = os.environ[name]
        out[name] = value
    return out
