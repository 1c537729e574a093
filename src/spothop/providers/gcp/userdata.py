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
from collections.abc import Mapping, Sequence

from spothop.providers import bootstrap
from spothop.providers.bootstrap import DEFAULT_INSTALL, ENV_FILE, RUN_FILE, UNIT

__all__ = ["DEFAULT_INSTALL", "ENV_FILE", "RUN_FILE", "UNIT", "render_startup_script"]

METADATA_VALUE_MAX_BYTES = 256 * 1024  # Compute Engine: one metadata value at most 256 KB
METADATA_URL = "http://metadata.google.internal"
CREDENTIAL_KEYS = frozenset({"GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_AUTH_ACCESS_TOKEN"})
_SECRET_VALUE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|\"type\"\s*:\s*\"service_account\"")
_HINT = "a VM reaches Google APIs through its service account (service_account=)"
CREDENTIALS = bootstrap.CredentialRule(
    keys=CREDENTIAL_KEYS,
    value=_SECRET_VALUE,
    key_error=f"the launch's env sets {{key}}, a Google credential; {_HINT}",
    value_error=f"the launch's env {{key}} holds a private key; {_HINT}",
    command_error=f"the bootstrap command holds a private key; {_HINT}",
)
SHAPE = bootstrap.BootScript(
    credentials=CREDENTIALS,
    launch="a Compute Engine launch",
    max_bytes=METADATA_VALUE_MAX_BYTES,
    too_large=(
        "the startup script for this launch is {size} bytes, over Compute Engine's "
        "{max_bytes} per metadata value; shorten the bootstrap command or the env"
    ),
    protocol="gcp",
    metadata_url=METADATA_URL,
    instance_id_lines=(
        "SPOTHOP_INSTANCE_ID=$(curl -sf -H 'Metadata-Flavor: Google' "
        f"{METADATA_URL}/computeMetadata/v1/instance/id)"
    ),
    writer="Compute Engine",
    note="no credential here",
    every_boot=True,  # the guest environment runs the startup script at every boot
    stop_timeout_s=25,
)


def refuse_credentials(env: Mapping[str, str], command: Sequence[str]) -> None:
    """Raise ConfigError if ``env`` or ``command`` carries a Google credential (named, never shown)."""
    bootstrap.refuse_credentials(CREDENTIALS, env, command)


render_startup_script = SHAPE.render
