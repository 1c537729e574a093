"""google-cloud-compute, imported on first use; credentials, the project and the REST clients.

- The SDK is imported only when a Compute Engine provider is created, so
  spothop runs without it; a missing SDK is a ConfigError naming the extra.
- Credentials come from Application Default Credentials (``google.auth.default``):
  ``GOOGLE_APPLICATION_CREDENTIALS``, the gcloud ADC file, the metadata server.
  spothop never reads, stores, logs or passes them on; none found is
  :class:`~spothop.errors.AuthFailed` naming each place looked.
- Clients use the REST transport (``endpoint_url`` points them elsewhere: a
  private endpoint, or the tests' fake API) and never retry on their own:
  throttling is retried, bounded, in :func:`spothop.providers.gcp.errors.with_retries`.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Any

from spothop.errors import AuthFailed, ConfigError

EXTRA = "gcp"  # pip install 'spothop[gcp]'
NO_CREDENTIALS = "NoCredentials"
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def import_compute() -> Any:
    """The ``google.cloud.compute_v1`` module, or a ConfigError saying which extra installs it."""
    try:
        compute_v1 = importlib.import_module("google.cloud.compute_v1")
    except ImportError as exc:
        raise ConfigError(
            f"the gcp provider needs google-cloud-compute, which is not installed ({exc.name}); "
            f"install it with `pip install 'spothop[{EXTRA}]'`"
        ) from None
    return compute_v1


def adc_file() -> Path:
    """Where gcloud keeps Application Default Credentials (``CLOUDSDK_CONFIG`` moves it)."""
    root = os.environ.get("CLOUDSDK_CONFIG") or "~/.config/gcloud"
    return Path(root).expanduser() / "application_default_credentials.json"


def credentials(provider: str, given: Any = None) -> tuple[Any, str | None]:
    """(credentials, the project they name or None): ``given`` as is, else ADC's chain."""
    if given is not None:
        return given, None
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        found, project = google.auth.default(scopes=SCOPES)
    except DefaultCredentialsError:
        named = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        raise AuthFailed(
            provider,
            NO_CREDENTIALS,
            "Application Default Credentials found no Google credentials; they looked at "
            "GOOGLE_APPLICATION_CREDENTIALS"
            + (f" ({named})" if named else " (not set)")
            + f", the gcloud file {adc_file()} and the Compute Engine metadata server",
            "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
            "to a service-account key file",
        ) from None
    return found, project


def make_clients(credentials: Any, endpoint_url: str | None) -> dict[str, Any]:
    """One REST client per Compute Engine resource spothop uses, sharing the credentials."""
    compute_v1 = import_compute()
    from google.api_core.client_options import ClientOptions

    options = ClientOptions(api_endpoint=endpoint_url) if endpoint_url else None
    kinds = {
        "instances": compute_v1.InstancesClient,
        "zones": compute_v1.ZonesClient,
        "machine_types": compute_v1.MachineTypesClient,
        "accelerator_types": compute_v1.AcceleratorTypesClient,
        "zone_operations": compute_v1.ZoneOperationsClient,
    }
    return {
        name: kind(credentials=credentials, transport="rest", client_options=options)
        for name, kind in kinds.items()
    }
