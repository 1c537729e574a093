"""The local cloud's boot script: :mod:`spothop.providers.bootstrap`'s, in the imitated cloud's shape.

A local instance runs what a cloud VM runs: the provider renders the boot
script (:class:`~spothop.providers.bootstrap.BootScript`) for the launch and
hands it to the instance as its ``user-data`` file; the instance's host runs
it as root in the instance's own root (:mod:`.isolation`). One shape per
metadata protocol (:func:`shape`): the protocol, the instance's metadata URL
(known once its host serves the endpoint), ``instance_id_lines`` that ask the
local endpoint for the instance id the way that cloud's own images do (the
literal id stands in where the endpoint does not answer: a world whose
``metadata_options`` say ``endpoint: down``, or an image without curl),
writer "local cloud (PROTOCOL)". The credential rule is a generic one (a
private key); the local cloud has no credentials of its own.

The install step (:func:`install_step`): the launch's ``install`` override
where it has one; else the launch's ``distribution`` (the control plane's
wheel, downloaded, its sha256 checked, installed into ``/opt/spothop``
without dependencies: the machine image has them); else nothing, since the
image already holds the Python environment the command runs with.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from spothop.providers import bootstrap
from spothop.providers.base import LaunchRequest
from spothop.providers.local.metadata import PROTOCOLS
from spothop.providers.local.metadata.codes import IdQuery

USER_DATA_MAX_BYTES = 1024 * 1024  # no real cloud's limit: the local cloud takes any sane script
NO_INSTALL = (
    "true  # the local cloud: its machine image holds the Python environment, nothing to install"
)

_CREDENTIALS = bootstrap.CredentialRule(
    keys=frozenset(),
    value=re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    key_error="env {key} carries a credential; a boot script never holds one",
    value_error="env {key} holds a private key; a boot script never holds one: give the "
    "instance what it needs through a bucket or the control plane",
    command_error="the bootstrap command holds a private key; a boot script never holds one",
)


def _curl(url: str, *headers: str, method: str = "GET") -> str:
    """A curl that answers nothing (never fails the script) when the endpoint does not."""
    flags = "".join(f" -H {shlex.quote(h)}" for h in headers)
    verb = "" if method == "GET" else f" -X {method}"
    return f"curl -sf --max-time 5{verb}{flags} {shlex.quote(url)} 2>/dev/null || true"


def _ask_endpoint(query: IdQuery, url: str) -> str:
    """Shell setting SPOTHOP_INSTANCE_ID from the endpoint at ``url``, as ``query`` says its cloud's images ask."""
    get = url + query.path
    if query.token_path is None:
        line = f"SPOTHOP_INSTANCE_ID=$({_curl(get, *query.headers)})"
    else:
        put = _curl(url + query.token_path, f"{query.token_ttl_header}: 300", method="PUT")
        flags = "".join(f" -H {shlex.quote(h)}" for h in query.headers)
        line = (
            f"t=$({put})\n"
            f'  if [ -n "$t" ]; then SPOTHOP_INSTANCE_ID=$(curl -sf --max-time 5{flags} '
            f'-H "{query.token_header}: $t" {shlex.quote(get)} 2>/dev/null || true); fi\n'
            f'  [ -n "$SPOTHOP_INSTANCE_ID" ] || SPOTHOP_INSTANCE_ID=$({_curl(get, *query.headers)})'
        )
    if query.json_key is not None:
        key = re.escape(query.json_key)
        line += (
            "\n  SPOTHOP_INSTANCE_ID=$(printf '%s' \"$SPOTHOP_INSTANCE_ID\" | "
            f'sed -n \'s/.*"{key}": *"\\([^"]*\\)".*/\\1/p\')'
        )
    return line


def instance_id_lines(protocol: str, metadata_url: str, instance_id: str) -> str:
    """Shell that sets SPOTHOP_INSTANCE_ID from the local endpoint (module docstring)."""
    return (
        "SPOTHOP_INSTANCE_ID=\n"
        "if command -v curl >/dev/null 2>&1; then\n"
        f"  {_ask_endpoint(PROTOCOLS[protocol].ID_QUERY, metadata_url.rstrip('/'))}\n"
        "fi\n"
        f"SPOTHOP_INSTANCE_ID=${{SPOTHOP_INSTANCE_ID:-{shlex.quote(instance_id)}}}"
    )


def shape(protocol: str, metadata_url: str, instance_id: str) -> bootstrap.BootScript:
    """The boot script's shape for one local instance speaking ``protocol`` at ``metadata_url``."""
    return bootstrap.BootScript(
        protocol=protocol,
        metadata_url=metadata_url,
        instance_id_lines=instance_id_lines(protocol, metadata_url, instance_id),
        writer=f"local cloud ({protocol})",
        credentials=_CREDENTIALS,
        launch="a local cloud launch",
        max_bytes=USER_DATA_MAX_BYTES,
        too_large=(
            "the user-data for this launch is {size} bytes, over the local cloud's {max_bytes}; "
            "shorten the bootstrap command or the env"
        ),
    )


def install_step(request: LaunchRequest) -> str:
    """The boot script's install step for ``request`` (module docstring)."""
    override = getattr(request, "install", None)
    if override is not None:
        return str(override)
    if (
        request.distribution is not None
    ):  # the control plane's wheel; the image has its dependencies
        return bootstrap.install_step(request.distribution, with_dependencies=False)
    return NO_INSTALL


def command_of(request: LaunchRequest) -> Sequence[str]:
    """The unit's command: the launch's bootstrap command, or an idle one (the instance just runs)."""
    return tuple(request.bootstrap_command) or ("sleep", "infinity")


def render(request: LaunchRequest, protocol: str, metadata_url: str, instance_id: str) -> str:
    """The user-data of one launch: the boot script, ConfigError if it cannot be rendered."""
    env: Mapping[str, str] = request.env
    return shape(protocol, metadata_url, instance_id).render(
        command_of(request), env, install=install_step(request)
    )


def check(request: LaunchRequest) -> None:
    """ConfigError now, before anything runs, for a launch whose boot script cannot be rendered."""
    bootstrap.check_launch(
        _CREDENTIALS, command_of(request), request.env, launch="a local cloud launch"
    )
