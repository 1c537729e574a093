"""The startup script a Compute Engine VM boots with: install spothop, start the agent, no credential.

Served as the ``startup-script`` metadata item (run as root by the guest
environment at every boot; the unit is started once). It writes
``/etc/spothop/agent.env`` (mode 0600: the launch's ``env`` and the
provider's own variables), installs spothop (``install``, default a venv in
``/opt/spothop`` pinned to this version) and starts the bootstrap command as
the systemd unit ``spothop-agent``, with ``SPOTHOP_INSTANCE_ID`` read from the
metadata server (``Metadata-Flavor: Google``).

What never goes in: a Google credential. A VM reaches Google APIs through its
service account; an env key that names a credential file
(``GOOGLE_APPLICATION_CREDENTIALS``) or a value holding a private key or a
service-account key file is refused before any call, named but never shown.
Compute Engine caps one metadata value at 256 KB.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Mapping, Sequence

from spothop import __version__
from spothop.errors import ConfigError
from spothop.providers.container import docker_check, in_container
from spothop.providers.local.metadata import METADATA_PROTOCOL_ENV, METADATA_URL_ENV

METADATA_VALUE_MAX_BYTES = 256 * 1024  # Compute Engine: one metadata value at most 256 KB
METADATA_URL = "http://metadata.google.internal"
ENV_FILE = "/etc/spothop/agent.env"
RUN_FILE = "/etc/spothop/run.sh"
UNIT = "spothop-agent"
DEFAULT_INSTALL = (
    "if ! /opt/spothop/bin/python -c 'import spothop' 2>/dev/null; then\n"
    "  python3 -m venv /opt/spothop\n"
    f"  /opt/spothop/bin/pip install --quiet 'spothop=={__version__}'\n"
    "fi"
)
CREDENTIAL_KEYS = frozenset({"GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_AUTH_ACCESS_TOKEN"})
_SECRET_VALUE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|\"type\"\s*:\s*\"service_account\"")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def refuse_credentials(env: Mapping[str, str], command: Sequence[str]) -> None:
    """Raise ConfigError if ``env`` or ``command`` carries a Google credential (named, never shown)."""
    hint = "a VM reaches Google APIs through its service account (service_account=)"
    for key, value in env.items():
        if key.upper() in CREDENTIAL_KEYS:
            raise ConfigError(f"the launch's env sets {key}, a Google credential; {hint}")
        if _SECRET_VALUE.search(value):
            raise ConfigError(f"the launch's env {key} holds a private key; {hint}")
    if any(_SECRET_VALUE.search(part) for part in command):
        raise ConfigError(f"the bootstrap command holds a private key; {hint}")


def render_startup_script(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    install: str | None = None,
    image: str | None = None,
) -> str:
    """The startup script for one launch (see the module docstring); ConfigError if it cannot be."""
    refuse_credentials(env, command)
    for key in env:
        if not _ENV_KEY.fullmatch(key):
            raise ConfigError(
                f"env key {key!r} is not a shell variable name (letters, digits and _, not first a digit)"
            )
    if not command:
        raise ConfigError(
            "a Compute Engine launch needs a bootstrap command (the agent's); none was given"
        )
    docker = ""
    if image is not None:  # the worker runs in the image, the agent on the host
        command = in_container(command, image, [*env, METADATA_PROTOCOL_ENV, METADATA_URL_ENV])
        docker = docker_check(image) + "\n"
    env_lines = "\n".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    end = f"SPOTHOP_END_{secrets.token_hex(8)}"
    script = f"""#!/bin/bash
# spothop: install and start the agent (written by spothop's Compute Engine provider; no credential here).
set -euo pipefail
if systemctl is-active --quiet {UNIT}.service || [ -f /etc/spothop/started ]; then exit 0; fi
umask 077
mkdir -p /etc/spothop
cat > {ENV_FILE} <<'{end}'
{METADATA_PROTOCOL_ENV}=gcp
{METADATA_URL_ENV}={METADATA_URL}
{env_lines}
{end}
{docker}{install if install is not None else DEFAULT_INSTALL}
cat > {RUN_FILE} <<'{end}'
#!/bin/bash
set -euo pipefail
set -a; . {ENV_FILE}; set +a
export PATH=/opt/spothop/bin:$PATH
SPOTHOP_INSTANCE_ID=$(curl -sf -H 'Metadata-Flavor: Google' {METADATA_URL}/computeMetadata/v1/instance/id)
export SPOTHOP_INSTANCE_ID
exec {shlex.join(command)}
{end}
chmod 700 {RUN_FILE}
cat > /etc/systemd/system/{UNIT}.service <<'{end}'
[Unit]
Description=spothop agent
Wants=network-online.target
After=network-online.target
[Service]
ExecStart=/bin/bash {RUN_FILE}
Restart=no
KillMode=mixed
TimeoutStopSec=25
[Install]
WantedBy=multi-user.target
{end}
systemctl daemon-reload
touch /etc/spothop/started
systemctl start --no-block {UNIT}.service
"""
    size = len(script.encode("utf-8"))
    if size > METADATA_VALUE_MAX_BYTES:
        raise ConfigError(
            f"the startup script for this launch is {size} bytes, over Compute Engine's "
            f"{METADATA_VALUE_MAX_BYTES} per metadata value; shorten the bootstrap command or the env"
        )
    return script
