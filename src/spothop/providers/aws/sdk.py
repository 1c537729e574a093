"""boto3, imported on first use; the session, its credentials and its clients.

- boto3 is imported only when an AWS provider is created, so spothop runs
  (and every other provider works) without it; a missing boto3 is a
  :class:`~spothop.errors.ConfigError` naming the extra to install.
- Credentials come from boto3's own chain (environment, shared credentials
  and config files, SSO, web identity, container and instance metadata);
  spothop never reads, stores, logs or passes them on. None found is
  :class:`~spothop.errors.AuthFailed` naming what was looked for and where.
- Clients never retry on their own (``total_max_attempts=1``): throttling is
  retried once, bounded, in :func:`spothop.providers.aws.errors.with_retries`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from spothop.errors import AuthFailed, ConfigError

EXTRA = "aws"  # pip install 'spothop[aws]'
NO_CREDENTIALS = "NoCredentials"  # the code of AuthFailed when the chain found none


def import_boto3() -> Any:
    """The boto3 module, or a ConfigError saying which extra installs it."""
    try:
        import boto3
        import botocore  # noqa: F401  (botocore comes with boto3; both must import)
    except ImportError as exc:
        raise ConfigError(
            f"the aws provider needs boto3, which is not installed ({exc.name}); "
            f"install it with `pip install 'spothop[{EXTRA}]'`"
        ) from None
    return boto3


def make_session(profile: str | None = None, session: Any = None) -> Any:
    """A boto3 Session (``session`` as given, else one for ``profile`` or the default chain)."""
    boto3 = import_boto3()
    if session is not None:
        return session
    from botocore.exceptions import ProfileNotFound

    try:
        return boto3.session.Session(profile_name=profile)
    except ProfileNotFound:
        raise ConfigError(
            f"AWS profile {profile!r} is in neither {_config_file()} nor {_credentials_file()}; "
            "name a profile that is there (AWS_PROFILE, or profile=) or add it with `aws configure --profile`"
        ) from None


def check_credentials(provider: str, session: Any) -> None:
    """Raise AuthFailed naming each place the chain looked, if it found no credentials.

    Nothing about the credentials found is kept or shown; only their absence is reported.
    """
    if session.get_credentials() is not None:
        return
    profile = session.profile_name or "default"
    raise AuthFailed(
        provider,
        NO_CREDENTIALS,
        "boto3 found no AWS credentials; it looked in the environment "
        "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), "
        f"the shared credentials file {_credentials_file()} and the config file {_config_file()} "
        f"for profile {profile!r} (AWS_PROFILE; SSO, assume-role and credential_process there too), "
        "a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE), container credentials "
        "(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI) and the instance metadata service",
        "set one of them, e.g. `aws configure` or `aws sso login`",
    )


def check_region(provider: str, session: Any, region: str) -> str:
    """``region`` if EC2 has it, else a ConfigError naming the regions there are.

    A region EC2 has but the account has not enabled is refused by EC2 itself
    (``OptInRequired``), which comes out as AuthFailed with that code and a hint.
    """
    known = set(session.get_available_regions("ec2")) | set(
        session.get_available_regions("ec2", partition_name="aws-cn")
    )
    if region in known:
        return region
    raise ConfigError(
        f"{provider}: EC2 has no region {region!r}; regions are spelled like us-east-1 "
        f"(known: {', '.join(sorted(known))})"
    )


def default_region(session: Any) -> str | None:
    """The region of the session's configuration (AWS_REGION, AWS_DEFAULT_REGION, the profile)."""
    region = session.region_name or os.environ.get("AWS_REGION")
    return str(region) if region else None


def make_client(session: Any, service: str, region: str, endpoint_url: str | None) -> Any:
    """A client that does not retry by itself and gives up a connection in bounded time."""
    from botocore.config import Config

    config = Config(
        retries={"total_max_attempts": 1, "mode": "standard"},
        connect_timeout=10,
        read_timeout=60,
        user_agent_extra="spothop",
    )
    return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)


def _credentials_file() -> Path:
    return Path(os.environ.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")).expanduser()


def _config_file() -> Path:
    return Path(os.environ.get("AWS_CONFIG_FILE", "~/.aws/config")).expanduser()
