"""A job's ``secrets``: names kept in its spec, values kept apart and never printed.

A job file's ``secrets`` is SkyPilot's: a mapping ``NAME: value`` where a null (or
empty) value is one the user must give with ``spothop launch --secret NAME=VALUE``
(or ``--secret NAME``, this shell's ``$NAME``); a list of names means every value is to
be given. :func:`take_secrets` splits what a file and the ``--secret`` options give into
the spec's part (the names, stored and shown) and the values (held by the loaded spec
only, :attr:`~spothop.jobs.spec.JobSpec.secret_values`: stored sealed by the launch,
:mod:`spothop.state.sealed`, and handed to the job's agents through the control plane).

Every error names the secret and never its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from spothop.errors import JobSpecError
from spothop.jobs.spec_values import ENV_NAME, MAX_SHOWN, RESERVED_ENV_PREFIX

MASK = "****"  # what every output shows for a secret's value
# Linux's limit on one "NAME=value" string handed to exec (MAX_ARG_STRLEN, 32 pages).
SECRET_MAX_BYTES = 128 * 1024
_GIVE = "give it with --secret {name}=VALUE (spothop launch or plan; --secret {name} passes your shell's ${name})"


def take_secrets(
    data: dict[Any, Any],
    given: Mapping[str, str],
    where: str = "",
    launch_env: Mapping[str, str] | None = None,
) -> tuple[dict[Any, Any], dict[str, str]]:
    """``data`` with its ``secrets`` as a sorted list of names, and the values: the file's,
    with ``given`` (``--secret``) over them. :class:`JobSpecError` naming each secret that is
    malformed, in ``envs`` too (the file's, or ``launch_env``: ``--env``), or left without a
    value."""
    raw = data.get("secrets")
    if raw is None and not given:
        return data, {}
    declared = _declared(raw, where)
    values: dict[str, Any] = {**declared, **given}
    problems: list[str] = []
    file_envs = data.get("envs")
    envs = {**(file_envs if isinstance(file_envs, Mapping) else {}), **(launch_env or {})}
    out: dict[str, str] = {}
    for name, value in values.items():
        key = f"{where}secrets.{str(name)[:MAX_SHOWN]}"
        if not isinstance(name, str) or not ENV_NAME.match(name):
            problems.append(f"{key}: not an environment variable name (letters, digits, _)")
        elif name.startswith(RESERVED_ENV_PREFIX):
            problems.append(f"{key}: names starting with {RESERVED_ENV_PREFIX} are spothop's own")
        elif envs and name in envs:
            problems.append(f"{key}: also in envs; keep it in secrets only (never stored in clear)")
        elif value is None or value == "":
            problems.append(f"{key}: has no value; " + _GIVE.format(name=name))
        elif isinstance(value, dict | list):
            problems.append(f"{key}: a value is text, not a {type(value).__name__}")
        else:
            text = _text(value)
            if "\x00" in text or len(text.encode("utf-8", "replace")) > SECRET_MAX_BYTES:
                problems.append(
                    f"{key}: its value holds a NUL or is over {SECRET_MAX_BYTES // 1024} KiB, "
                    "which no worker's environment takes"
                )
            else:
                out[name] = text
    if problems:
        raise JobSpecError("\n".join(problems))
    return {**data, "secrets": sorted(out)}, out


def _declared(raw: Any, where: str) -> dict[Any, Any]:
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, list | tuple) and all(isinstance(n, str) for n in raw):
        return dict.fromkeys(raw)  # names only: each value is to be given
    raise JobSpecError(
        f"{where}secrets: a mapping NAME: value (a null value is given with --secret NAME=VALUE),"
        f" not a {type(raw).__name__}"
    )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def masked(names: list[str] | tuple[str, ...]) -> dict[str, str]:
    """What every output shows of a job's secrets: each name, its value masked."""
    return dict.fromkeys(names, MASK)
