"""Every cloud's credential rule, so a job whose ``envs`` carry a cloud credential is refused
before anything is stored or launched (``spothop plan``, ``launch`` and ``POST /v1/jobs``).

Each real cloud declares what its credentials look like in its own folder
(``providers/<cloud>/userdata.py``: ``CREDENTIALS``, a
:class:`~spothop.providers.bootstrap.CredentialRule`), where its boot script refuses them at
launch; this module collects them, so a job is refused whichever cloud it may be placed on:
a credential in a job's environment would be stored with the job and written to its instances.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from spothop.providers.bootstrap import CredentialRule, refuse_credentials


@cache
def credential_rules() -> tuple[CredentialRule, ...]:
    """The credential rule of every cloud adapter that declares one (its ``userdata.CREDENTIALS``)."""
    rules: list[CredentialRule] = []
    folder = str(Path(__file__).parent)
    for module in sorted(pkgutil.iter_modules([folder]), key=lambda m: m.name):
        if not module.ispkg:
            continue
        try:
            userdata = importlib.import_module(f"spothop.providers.{module.name}.userdata")
        except ImportError:
            continue
        rule = getattr(userdata, "CREDENTIALS", None)
        if isinstance(rule, CredentialRule):
            rules.append(rule)
    return tuple(rules)


def refuse_cloud_credentials(envs: Mapping[str, str]) -> None:
    """:class:`~spothop.errors.ConfigError` naming the first variable of ``envs`` that is (or
    holds) a cloud credential by any cloud's rule; the message names the key, never the value."""
    for rule in credential_rules():
        refuse_credentials(rule, envs, ())
