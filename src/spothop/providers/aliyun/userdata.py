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
from collections.abc import Mapping, Sequence

from spothop.providers import bootstrap
from spothop.providers.bootstrap import DEFAULT_INSTALL, ENV_FILE, RUN_FILE, UNIT

__all__ = ["DEFAULT_INSTALL", "ENV_FILE", "RUN_FILE", "UNIT", "render_user_data"]

USER_DATA_MAX_BYTES = 32 * 1024  # ECS: UserData at most 32 KB before base64
METADATA_URL = "http://100.100.100.200"
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
_HINT = "an instance reaches Alibaba Cloud through its RAM role (ram_role=)"
CREDENTIALS = bootstrap.CredentialRule(
    keys=CREDENTIAL_KEYS,
    value=_ACCESS_KEY_ID,
    key_error=f"the launch's env sets {{key}}, an Alibaba Cloud credential; {_HINT}",
    value_error=f"the launch's env {{key}} holds what looks like an AccessKey id; {_HINT}",
    command_error=f"the bootstrap command holds what looks like an AccessKey id; {_HINT}",
)
SHAPE = bootstrap.BootScript(
    credentials=CREDENTIALS,
    launch="an ECS launch",
    max_bytes=USER_DATA_MAX_BYTES,
    too_large=(
        "the user-data for this launch is {size} bytes, over ECS's {max_bytes}; "
        "shorten the bootstrap command or the env"
    ),
    protocol="aliyun",
    metadata_url=METADATA_URL,
    instance_id_lines=(
        f"md_token=$(curl -sf -X PUT {METADATA_URL}/latest/api/token "
        "-H 'X-aliyun-ecs-metadata-token-ttl-seconds: 300')\n"
        'SPOTHOP_INSTANCE_ID=$(curl -sf -H "X-aliyun-ecs-metadata-token: $md_token" '
        f"{METADATA_URL}/latest/meta-data/instance-id)"
    ),
    writer="ECS",
)


def refuse_credentials(env: Mapping[str, str], command: Sequence[str]) -> None:
    """Raise ConfigError if ``env`` or ``command`` carries an Alibaba Cloud credential."""
    bootstrap.refuse_credentials(CREDENTIALS, env, command)


render_user_data = SHAPE.render
