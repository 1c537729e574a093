"""The ECS SDK, imported on first use; credentials, the client per region, one RPC call.

- alibabacloud-ecs20140526 is imported only when an ECS provider is created;
  a missing SDK is a ConfigError naming the extra.
- Credentials: ``ALIBABA_CLOUD_ACCESS_KEY_ID`` / ``ALIBABA_CLOUD_ACCESS_KEY_SECRET``
  (``ALIBABA_CLOUD_SECURITY_TOKEN`` for an STS token) in the environment, else
  the Alibaba Cloud credentials chain (``~/.alibabacloud/credentials``,
  ``~/.aliyun/config.json``, an ECS RAM role). spothop never logs or passes
  them on; none found is :class:`~spothop.errors.AuthFailed` naming each place.
- Calls go through the ECS client's ``call_api`` (the generated methods do the
  same), RPC style, with the SDK's own retries off: throttling is retried,
  bounded, in :func:`spothop.providers.aliyun.errors.with_retries`.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from spothop.errors import AuthFailed, ConfigError

EXTRA = "aliyun"  # pip install 'spothop[aliyun]'
API_VERSION = "2014-05-26"
NO_CREDENTIALS = "NoCredentials"
KEY_ID_ENV = "ALIBABA_CLOUD_ACCESS_KEY_ID"
SECRET_ENV = "ALIBABA_CLOUD_ACCESS_KEY_SECRET"
TOKEN_ENV = "ALIBABA_CLOUD_SECURITY_TOKEN"


def import_ecs() -> Any:
    """The ECS client class, or a ConfigError saying which extra installs it."""
    try:
        client_type = importlib.import_module("alibabacloud_ecs20140526.client").Client
    except ImportError as exc:
        raise ConfigError(
            f"the aliyun provider needs alibabacloud-ecs20140526, which is not installed ({exc.name}); "
            f"install it with `pip install 'spothop[{EXTRA}]'`"
        ) from None
    return client_type


def _looked() -> str:
    return (
        f"the environment ({KEY_ID_ENV} and {SECRET_ENV}, {TOKEN_ENV}), "
        f"the credentials file {Path('~/.alibabacloud/credentials').expanduser()} "
        "(ALIBABA_CLOUD_CREDENTIALS_FILE), the CLI config "
        f"{Path('~/.aliyun/config.json').expanduser()} and the ECS RAM role of this machine"
    )


def credential(provider: str) -> dict[str, Any]:
    """The Config fields that carry the credentials (an access key pair, or the SDK's chain)."""
    key_id, secret = os.environ.get(KEY_ID_ENV), os.environ.get(SECRET_ENV)
    if key_id and secret:
        fields: dict[str, Any] = {"access_key_id": key_id, "access_key_secret": secret}
        if os.environ.get(TOKEN_ENV):
            fields["security_token"] = os.environ[TOKEN_ENV]
        return fields
    try:
        from alibabacloud_credentials.client import Client as CredentialClient

        chain = CredentialClient()
        chain.get_credential()
    except Exception:  # the chain raises its own types (and OSError) when it finds nothing
        raise AuthFailed(
            provider,
            NO_CREDENTIALS,
            f"no Alibaba Cloud credentials were found; looked in {_looked()}",
            f"set {KEY_ID_ENV} and {SECRET_ENV}, or run `aliyun configure`",
        ) from None
    return {"credential": chain}


def make_client(
    provider: str, region: str, endpoint_url: str | None, fields: dict[str, Any]
) -> Any:
    """An ECS client for ``region`` (``endpoint_url``: another endpoint, ``http://`` allowed)."""
    client_type = import_ecs()
    from alibabacloud_tea_openapi import utils_models

    options: dict[str, Any] = {"region_id": region, **fields}
    if endpoint_url:
        scheme, _, host = endpoint_url.rpartition("://")
        options["endpoint"] = host.rstrip("/")
        options["protocol"] = (scheme or "https").upper()
    return client_type(utils_models.Config(**options))


def call(client: Any, action: str, params: dict[str, Any]) -> dict[str, Any]:
    """One ECS RPC call; the answer's body (a dict)."""
    from alibabacloud_tea_openapi import utils_models
    from alibabacloud_tea_openapi.utils import Utils
    from darabonba.runtime import RuntimeOptions

    spec = utils_models.Params(
        action=action,
        version=API_VERSION,
        protocol="HTTPS",
        pathname="/",
        method="POST",
        auth_type="AK",
        style="RPC",
        req_body_type="formData",
        body_type="json",
    )
    request = utils_models.OpenApiRequest(query=Utils.query(params))
    runtime = RuntimeOptions(
        autoretry=False, max_attempts=1, read_timeout=60_000, connect_timeout=10_000
    )
    answer = client.call_api(spec, request, runtime)
    return dict(answer.get("body") or {})
