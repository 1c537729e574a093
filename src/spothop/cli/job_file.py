"""The job-file options of ``spothop launch`` and ``plan``: ``--env``, ``--secret`` and ``--explain``.

:func:`show_dialect` names the dialect the file is read in ("SkyPilot task", "dstack
task", "spothop job"; :mod:`spothop.jobs.dialect`) and, with ``--explain``, what each of
its keys became. ``--env NAME=VALUE``, as SkyPilot's ``--env``: it takes precedence over the file's ``envs`` and fills the values a
file leaves for the user (``HF_TOKEN:`` with no value); ``--env NAME`` alone passes the
value of ``NAME`` in this shell's environment. ``--secret NAME=VALUE`` (or ``--secret NAME``)
the same for the file's ``secrets``: the value is never printed, stored in clear or put in a
boot script (:mod:`spothop.jobs.spec_secrets`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from spothop.cli.output import console, err_console, note, table
from spothop.errors import ConfigError

if TYPE_CHECKING:
    from spothop.jobs.spec import JobSpec

EnvOption = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        help="NAME=VALUE for the job's envs (repeatable; over the file's, filling the values it "
        "leaves for you); --env NAME passes this shell's value",
    ),
]
SecretOption = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="NAME=VALUE for the job's secrets (repeatable; never stored in clear or printed); "
        "--secret NAME passes this shell's value",
    ),
]
ExplainOption = Annotated[
    bool,
    typer.Option("--explain", help="show what each key of the job file became in spothop's spec"),
]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def env_overrides(values: list[str] | None, flag: str = "--env") -> dict[str, str]:
    """The ``--env`` (or ``--secret``: ``flag``) values as NAME → VALUE; :class:`ConfigError`
    for a bad name or a bare NAME this shell does not set. A ``--secret``'s value is never
    echoed in the error."""
    out: dict[str, str] = {}
    for item in values or ():
        name, equals, value = item.partition("=")
        if not _NAME.fullmatch(name):
            shown = repr(item)[:80] if flag == "--env" else repr(name)[:80]
            raise ConfigError(f"{flag} {shown}: write NAME=VALUE, NAME being letters, digits and _")
        if not equals:
            if name not in os.environ:
                raise ConfigError(
                    f"{flag} {name}: not set in this shell; give its value: {flag} {name}=VALUE"
                )
            value = os.environ[name]
        out[name] = value
    return out


def secret_overrides(values: list[str] | None) -> dict[str, str]:
    """The ``--secret`` values as NAME → VALUE (:func:`env_overrides`' rules)."""
    return env_overrides(values, "--secret")


def show_dialect(path: Path, spec: JobSpec, explain: bool, *, stderr: bool) -> None:
    """Say which dialect ``path`` was read in (a note, on stderr); with ``explain``, each key's
    mapping as a table (on stderr too with ``stderr``, which keeps stdout for JSON)."""
    from spothop.jobs.dialect import explain as explained
    from spothop.jobs.dialect import file_dialect

    dialect, data = file_dialect(path)
    note(f"{path.name}: read as a {dialect}", stderr=True)  # a note: stdout stays the answer
    if explain and isinstance(data, dict):
        rows = [list(row) for row in explained(data, spec)]
        shown = table(f"{path.name} ({dialect}) → spothop", ["key", "spothop field", "value"], rows)
        (err_console if stderr else console).print(shown)
