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
from collections.abc import Mapping, Sequence

from spothop.providers import bootstrap
from spothop.providers.bootstrap import DEFAULT_INSTALL, ENV_FILE, RUN_FILE, UNIT

__all__ = ["DEFAULT_INSTALL", "ENV_FILE", "RUN_FILE", "UNIT", "render_user_data"]

USER_DATA_MAX_BYTES = 16 * 1024  # EC2: user data is limited to 16 KB, before base64
IMDS_URL = "http://169.254.169.254"

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
_PROFILE = "give it an instance profile (instance_profile=)"
CREDENTIALS = bootstrap.CredentialRule(
    keys=CREDENTIAL_KEYS,
    key_parts=("SECRET_ACCESS_KEY",),
    value=_ACCESS_KEY_ID,
    key_error=(
        "the launch's env sets {key}, an AWS credential; an instance never gets one from "
        "spothop: give it an instance profile (instance_profile=) for the AWS calls it makes"
    ),
    value_error=(
        "the launch's env {key} holds what looks like an AWS access key id; an instance never "
        f"gets a cloud credential from spothop: {_PROFILE}"
    ),
    command_error=(
        "the bootstrap command holds what looks like an AWS access key id; an instance never "
        f"gets a cloud credential from spothop: {_PROFILE}"
    ),
)
SHAPE = bootstrap.BootScript(
    credentials=CREDENTIALS,
    launch="an EC2 launch",
    max_bytes=USER_DATA_MAX_BYTES,
    too_large=(
        "the user-data for this launch is {size} bytes, over EC2's {max_bytes}; "
        "shorten the bootstrap command or the env (put large settings in the job's files)"
    ),
    protocol="aws",
    metadata_url=IMDS_URL,
    instance_id_lines=(
        f"imds_token=$(curl -sf -X PUT {IMDS_URL}/latest/api/token "
        "-H 'X-aws-ec2-metadata-token-ttl-seconds: 300')\n"
        'SPOTHOP_INSTANCE_ID=$(curl -sf -H "X-aws-ec2-metadata-token: $imds_token" '
        f"{IMDS_URL}/latest/meta-data/instance-id)"
    ),
    writer="EC2",
)


def refuse_credentials(env: Mapping[str, str], command: Sequence[str]) -> None:
    """Raise ConfigError if ``env`` or ``command`` carries an AWS credential (named, never shown)."""
    bootstrap.refuse_credentials(CREDENTIALS, env, command)


render_user_data = SHAPE.render
