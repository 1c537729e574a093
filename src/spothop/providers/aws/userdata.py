"""The user-data an EC2 instance boots with: install spothop, start the agent, nothing secret of the cloud's.

The script (bash, run once by cloud-init as root):

1. writes ``/etc/spothop/agent.env`` (mode 0600): the launch's ``env`` (the
   per-instance agent token, the control-plane URL, the job's variables) and
   the provider's own (``SPOTHOP_CLOUD``, the metadata protocol and URL);
2. installs spothop with the provider's install command (default: a venv in
   ``/opt/spothop`` from the package index, pinned to this spothop's version);
3. starts the launch's bootstrap command (normally ``python -m spothop.agent
   run ... -- CMD``) as the systemd unit ``spothop-agent``, with the instance
   id read from the instance metadata service (IMDSv2) at start.

What never goes in: a cloud credential. The instance reaches AWS (if it must)
through its instance profile; an env key that is one of AWS's credential
variables, or a value shaped like an access key id, is refused before any
call, and so is a script over EC2's 16 KiB limit.
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

USER_DATA_MAX_BYTES = 16 * 1024  # EC2: user data is limited to 16 KB, before base64
IMDS_URL = "http://169.254.169.254"
ENV_FILE = "/etc/spothop/agent.env"
RUN_FILE = "/etc/spothop/run.sh"
UNIT = "spothop-agent"
DEFAULT_INSTALL = (
    "if ! /opt/spothop/bin/python -c 'import spothop' 2>/dev/null; then\n"
    "  python3 -m venv /opt/spothop\n"
    f"  /opt/spothop/bin/pip install --quiet 'spothop=={__version__}'\n"
    "fi"
)

# AWS's credential variables (boto3's environment provider): never on an instance.
CREDENTIAL_KEYS = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_CREDENTIAL_EXPIRATION",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN",
    }
)
# An access key id: AKIA (long-term) or ASIA (temporary) and 16 more upper-case letters or digits.
_ACCESS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def refuse_credentials(env: Mapping[str, str], command: Sequence[str]) -> None:
    """Raise ConfigError if ``env`` or ``command`` carries an AWS credential (named, never shown)."""
    for key, value in env.items():
        if key.upper() in CREDENTIAL_KEYS or "SECRET_ACCESS_KEY" in key.upper():
            raise ConfigError(
                f"the launch's env sets {key}, an AWS credential; an instance never gets one from "
                "spothop: give it an instance profile (instance_profile=) for the AWS calls it makes"
            )
        if _ACCESS_KEY_ID.search(value):
            raise ConfigError(
                f"the launch's env {key} holds what looks like an AWS access key id; an instance never "
                "gets a cloud credential from spothop: give it an instance profile (instance_profile=)"
            )
    for part in command:
        if _ACCESS_KEY_ID.search(part):
            raise ConfigError(
                "the bootstrap command holds what looks like an AWS access key id; an instance never "
                "gets a cloud credential from spothop: give it an instance profile (instance_profile=)"
            )


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
        raise ConfigError("an EC2 launch needs a bootstrap command (the agent's); none was given")
    docker = ""
    if image is not None:  # the worker runs in the image, the agent on the host
        command = in_container(command, image, [*env, METADATA_PROTOCOL_ENV, METADATA_URL_ENV])
        docker = docker_check(image) + "\n"
    env_lines = "\n".join(f"{key}={shlex.quote(value)}" for key, value in env.items())
    end = f"SPOTHOP_END_{secrets.token_hex(8)}"  # a here-document's end no value can contain
    script = f"""#!/bin/bash
# spothop: install and start the agent (written by spothop's EC2 provider; no cloud credential in here).
set -euo pipefail
umask 077
mkdir -p /etc/spothop
cat > {ENV_FILE} <<'{end}'
{METADATA_PROTOCOL_ENV}=aws
{METADATA_URL_ENV}={IMDS_URL}
{env_lines}
{end}
{docker}{install if install is not None else DEFAULT_INSTALL}
cat > {RUN_FILE} <<'{end}'
#!/bin/bash
set -euo pipefail
set -a; . {ENV_FILE}; set +a
export PATH=/opt/spothop/bin:$PATH
imds_token=$(curl -sf -X PUT {IMDS_URL}/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
SPOTHOP_INSTANCE_ID=$(curl -sf -H "X-aws-ec2-metadata-token: $imds_token" {IMDS_URL}/latest/meta-data/instance-id)
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
            f"the user-data for this launch is {size} bytes, over EC2's {USER_DATA_MAX_BYTES}; "
            "shorten the bootstrap command or the env (put large settings in the job's files)"
        )
    return script
