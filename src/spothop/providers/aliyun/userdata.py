"""The user-data an ECS instance boots with: install spothop, start the agent, no cloud credential.

Run once by cloud-init as root (ECS passes ``UserData``, base64, at most
32 KB). It writes ``/etc/spothop/agent.env`` (mode 0600), installs spothop
(``install``, default a venv in ``/opt/spothop`` pinned to this version) and
starts the bootstrap command as the systemd unit ``spothop-agent``, with
``SPOTHOP_INSTANCE_ID`` read from the metadata service (100.100.100.200, in
security-hardened mode with a token).

What never goes in: an Alibaba Cloud credential. An instance that must call
Alibaba Cloud gets a RAM role (``ram_role=``); an env key that is one of the
credential variables, or a value shaped like an AccessKey id (``LTAI…``), is
refused before any call, named but never shown.
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

USER_DATA_MAX_BYTES = 32 * 1024  # ECS: UserData at most 32 KB before base64
METADATA_URL = "http://100.100.100.200"
ENV_FILE = "/etc/spothop/agent.env"
RUN_FILE = "/etc/spothop/run.sh"
UNIT = "spothop-agent"
DEFAULT_INSTALL = (
    "if ! /opt/spothop/bin/python -c 'import spothop' 2>/dev/null; then\n"
    "  python3 -m venv /opt/spothop\n"
    f"  /opt/spothop/bin/pip install --quiet 'spothop=={__version__}'\n"
    "fi"
)
CREDENTIAL_KEYS = frozenset(
    {
        "ALIBABA_CLOUD_ACCESS_KEY_ID",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
        "ALIBABA_CLOUD_SECURITY_TOKEN",
        "ALICLOUD_ACCESS_KEY",
        "ALICLOUD_SECRET_KEY",
    }
)
_ACCESS_KEY_ID = re.compile(r"\bLTAI[A-Za-z0-9]{12,30}\b")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def refuse_credentials(env: Mapping[str, str], command: Sequence[str]) -> None:
    """Raise ConfigError if ``env`` or ``command`` carries an Alibaba Cloud credential."""
    hint = "an instance reaches Alibaba Cloud through its RAM role (ram_role=)"
    for key, value in env.items():
        if key.upper() in CREDENTIAL_KEYS:
            raise ConfigError(f"the launch's env sets {key}, an Alibaba Cloud credential; {hint}")
        if _ACCESS_KEY_ID.search(value):
            raise ConfigError(
                f"the launch's env {key} holds what looks like an AccessKey id; {hint}"
            )
    if any(_ACCESS_KEY_ID.search(part) for part in command):
        raise ConfigError(f"the bootstrap command holds what looks like an AccessKey id; {hint}")


def render_user_data(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    install: str | None = None,
    image: str | None = None,
) -> str:
    """The user-data script for one launch (see the module docstring); ConfigError if it cannot be."""
    refuse_credentials(env, command)
    for key in env:
        if not _ENV_KEY.fullmatch(key):
            raise ConfigError(
                f"env key {key!r} is not a shell variable name (letters, digits and _, not first a digit)"
            )
    if not command:
        raise ConfigError("an ECS launch needs a bootstrap command (the agent's); none was given")
    docker = ""
    if image is not None:  # the worker runs in the image, the agent on the host
        command = in_container(command, image, [*env, METADATA_PROTOCOL_ENV, METADATA_URL_ENV])
        docker = docker_check(image) + "\n"
    env_lines = "\n".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    end = f"SPOTHOP_END_{secrets.token_hex(8)}"
    script = f"""#!/bin/bash
# spothop: install and start the agent (written by spothop's ECS provider; no cloud credential in here).
set -euo pipefail
umask 077
mkdir -p /etc/spothop
cat > {ENV_FILE} <<'{end}'
{METADATA_PROTOCOL_ENV}=aliyun
{METADATA_URL_ENV}={METADATA_URL}
{env_lines}
{end}
{docker}{install if install is not None else DEFAULT_INSTALL}
cat > {RUN_FILE} <<'{end}'
#!/bin/bash
set -euo pipefail
set -a; . {ENV_FILE}; set +a
export PATH=/opt/spothop/bin:$PATH
md_token=$(curl -sf -X PUT {METADATA_URL}/latest/api/token -H 'X-aliyun-ecs-metadata-token-ttl-seconds: 300')
SPOTHOP_INSTANCE_ID=$(curl -sf -H "X-aliyun-ecs-metadata-token: $md_token" {METADATA_URL}/latest/meta-data/instance-id)
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
TimeoutStopSec=150
[Install]
WantedBy=multi-user.target
{end}
systemctl daemon-reload
systemctl start --no-block {UNIT}.service
"""
    size = len(script.encode("utf-8"))
    if size > USER_DATA_MAX_BYTES:
        raise ConfigError(
            f"the user-data for this launch is {size} bytes, over ECS's {USER_DATA_MAX_BYTES}; "
            "shorten the bootstrap command or the env"
        )
    return script
