"""Where providers are found by name. Adding a cloud is one line in ``_FAMILIES``, or a package.

A real cloud's adapter registers by being a package ``providers/<cloud>/``
with a ``FAMILY`` attribute (a :class:`ProviderFamily`); the folder's name is
the family's name and the extra that installs its SDK.

A :class:`ProviderFamily` makes the providers of one adapter: a real cloud's
adapter is a family of one name, the local cloud a family of every cloud its
world runs (``aws-sim``, ``gcp-sim``, …), the fake provider a family of one
(``fake``). Families are named as ``module:attribute`` strings and imported on
first use, so a cloud whose SDK is not installed (``pip install
spothop[<cloud>]``) disables that one adapter with a clear message instead of
breaking the program.

Rules:

- ``get_provider(name, **options)`` asks the family registered under ``name``
  (``local``: the world's first cloud), else the family whose ``names()``
  lists it, and returns ``family.create(name, **options)``; an unknown name is
  a :class:`~spothop.errors.ConfigError` naming the known ones.
- ``options`` go to the family as they are (``world_path=`` for the local
  cloud, ``clock=`` for the fake); a family ignores options it does not take.
- ``provider_names()`` lists every family's members, in registration order.
- ``default_providers()`` makes the providers a controller launches on when none are
  named: every cloud of the local world plus the real clouds named in
  ``$SPOTHOP_PROVIDERS`` (a real cloud is opt-in).
"""

from __future__ import annotations

import importlib
import logging
import os
import pkgutil
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from spothop.errors import ConfigError, SpothopError, StoreUnwritable
from spothop.providers.base import Provider

log = logging.getLogger(__name__)

# family name → "module:attribute" of its ProviderFamily. One line per adapter.
_FAMILIES: dict[str, str] = {
    "local": "spothop.providers.local.provider:LOCAL_FAMILY",
    "fake": "spothop.providers.fake.provider:FAKE_FAMILY",
    # Each real cloud's adapter: the package providers/<cloud>/, its FAMILY, named by its folder.
    **{
        m.name: f"spothop.providers.{m.name}:FAMILY"
        for m in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda m: m.name)
        if m.ispkg and m.name not in ("local", "fake")
    },
}

# The extra that installs each adapter's SDK, for the error message.
_EXTRAS: dict[str, str] = {}


@runtime_checkable
class ProviderFamily(Protocol):
    """Makes the providers of one adapter.

    ``names`` lists the provider names this family serves under ``options``
    (a world file can change the local cloud's); ``create`` returns a new
    provider for one of them, or raises ConfigError for a name it does not
    serve. Both take the registry's keyword options and ignore unknown ones.
    """

    def names(self, **options: Any) -> list[str]: ...

    def create(self, name: str, **options: Any) -> Provider: ...


def _family(name: str) -> ProviderFamily:
    module_name, _, attribute = _FAMILIES[name].partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = _EXTRAS.get(name, name)
        raise ConfigError(
            f"provider {name!r} needs a package that is not installed ({exc.name}); "
            f"install it with `pip install 'spothop[{extra}]'`"
        ) from None
    family = getattr(module, attribute)
    if not isinstance(family, ProviderFamily):
        raise TypeError(
            f"{_FAMILIES[name]} is not a ProviderFamily (it needs names() and create())"
        )
    return family


def family_names() -> list[str]:
    """The registered families, in registration order."""
    return list(_FAMILIES)


def members(family: str, **options: Any) -> list[str]:
    """The provider names one family serves (``members("local")``: every cloud of the world)."""
    return _family(family).names(**options)


def provider_names(**options: Any) -> list[str]:
    """Every provider name that can be asked for, family members expanded."""
    return [member for family in _FAMILIES for member in _family(family).names(**options)]


def get_provider(name: str, **options: Any) -> Provider:
    """The provider called ``name``; ConfigError naming the known ones if there is none."""
    if name in _FAMILIES:
        return _family(name).create(name, **options)
    for family in _FAMILIES:
        found = _family(family)
        if name in found.names(**options):
            return found.create(name, **options)
    known = ", ".join(provider_names(**options))
    raise ConfigError(f"unknown provider {name!r}; known providers: {known}")


LOCAL_FAMILY = "local"  # the embedded cloud: every cloud of the world file, always there
PROVIDERS_ENV = "SPOTHOP_PROVIDERS"  # real clouds the controller also uses, comma-separated


def default_providers(names: tuple[str, ...] = ()) -> dict[str, Provider]:
    """The providers the controller launches on, by name.

    ``names`` when given; else every cloud of the local world plus the real clouds named in
    ``$SPOTHOP_PROVIDERS``. A real cloud is opt-in: making its adapter looks for credentials
    (boto3 asks the instance metadata service when nothing else is set), which a laptop has
    no reason to wait for. A provider that cannot be made (SDK missing, no credentials) is
    logged with its reason and left out, never fatal: the other clouds still run the jobs,
    and a job that allows only that provider says no offering satisfies it.
    """
    if not names:
        extra = os.environ.get(PROVIDERS_ENV, "")
        names = (
            *members(LOCAL_FAMILY),
            *(n.strip() for n in extra.split(",") if n.strip()),
        )
    providers: dict[str, Provider] = {}
    for name in dict.fromkeys(names):
        try:
            providers[name] = get_provider(name)
        except StoreUnwritable:
            raise  # this machine's disk, not the provider: every provider and store meets it
        except SpothopError as exc:
            log.warning("provider %s left out: %s", name, exc)
    return providers
