"""Names a package re-exports but imports only on first use (PEP 562), so importing it stays light.

A package lists ``name → module`` and installs the two hooks::

    _LAZY = {"Checkpointer": "spothop.checkpoint"}
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

The first ``package.name`` imports the module and keeps the value in the
package's namespace, so later lookups are plain attributes; ``dir(package)``
lists the lazy names beside the loaded ones; an unknown name is the usual
AttributeError.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, serving ``table``'s names."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
