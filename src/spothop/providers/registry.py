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
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from spothop.errors import ConfigError
from spothop.providers.base import Provider

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
