"""Google Compute Engine behind spothop's provider interface (extra ``gcp``: google-cloud-compute).

``FAMILY`` is what the registry finds (``get_provider("gcp", **options)``);
importing this package does not import the SDK: creating a provider does, and
a missing google-cloud-compute is a ConfigError naming the extra. See
``provider.py`` for what each method asks of Compute Engine and
``docs/providers-gcp.md`` for the options.
"""

from __future__ import annotations

from spothop.providers.gcp.provider import GcpFamily, GcpProvider

FAMILY = GcpFamily()

__all__ = ["FAMILY", "GcpFamily", "GcpProvider"]
