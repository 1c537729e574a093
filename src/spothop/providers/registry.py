"""Where providers are found by name. Adding a cloud is one line in ``_FACTORIES``.

Factories are named as ``module:attribute`` strings and imported on first use,
so a cloud whose SDK is not installed (``pip install spothop[aws]``) disables
that one adapter with a clear message instead of breaking the program.
A factory is called with the provider name and keyword options, and returns a
:class:`~spothop.providers.base.Provider`. A *family* factory (the local
cloud) serves several names: it answers ``names()`` with the clouds it runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from spothop.errors import ConfigError
from spothop.providers.base import Provider

# name → "module:factory". One line per cloud.
_FACTORIES: dict[str, str] = {
    "local": "spothop.providers.local.provider:local_family",
}

# The extra that installs each adapter's SDK, for the error message.
_EXTRAS: dict[str, str] = {}


def _load(name: str) -> Any:
    target = _FACTORIES[name]
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        extra = _EXTRAS.get(name, name)
        raise ConfigError(
            f"provider {name!r} needs a package that is not installed ({exc.name}); "
            f"install it with `pip install 'spothop[{extra}]'`"
        ) from None
    factory: Callable[..., Any] = getattr(module, attribute)
    return factory


def provider_names() -> list[str]:
    """Every provider name that can be asked for, family members expanded."""
    names: list[str] = []
    for name in _FACTORIES:
        factory = _load(name)
        members = getattr(factory, "names", None)
        names.extend(members() if callable(members) else [name])
    return names


def get_provider(name: str, **options: Any) -> Provider:
    """The provider called ``name``; ConfigError naming the known ones if there is none."""
    if name in _FACTORIES:
        provider: Provider = _load(name)(name, **options)
        return provider
    for family in _FACTORIES:
        factory = _load(family)
        members = getattr(factory, "names", None)
        if callable(members) and name in members(**options):
            provider = factory(name, **options)
            return provider
    known = ", ".join(provider_names())
    raise ConfigError(f"unknown provider {name!r}; known providers: {known}")
