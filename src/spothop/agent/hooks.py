"""Hooks a deployment plugs into the emergency protocol: lease release and upload.

- :class:`LeaseReleaser` — ``release_worker(worker_id) -> int``: put every
  shard leased to the worker back in the queue, return how many. Given, it
  replaces the control plane's release (``--lease-releaser``). The agent
  passes the worker's id in ``SPOTHOP_WORKER_ID``; the worker claims under it.
- ``Upload`` — ``() -> None``: push what is still local (the emergency
  checkpoint) to durable storage.

Recording the interruption is the control plane's (:mod:`spothop.controlplane`).

Hooks given on the command line are ``module:attribute`` specs naming a
zero-argument factory (:func:`load_hook`); that is how a deployment plugs in
its queue adapter without the agent importing the queue at start.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from spothop.wire.errors import AgentConfigError

Upload = Callable[[], None]


class LeaseReleaser(Protocol):
    def release_worker(self, worker_id: str) -> int:
        """Requeue every shard leased to ``worker_id``; return how many. May raise; the agent logs it."""


def load_hook(spec: str) -> Any:
    """``module:attribute`` → the attribute called with no arguments (a factory's product).

    AgentConfigError names the spec when the module or attribute is missing.
    """
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise AgentConfigError(
            f"a hook is given as module:attribute, e.g. mypkg.hooks:make_releaser; got {spec!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentConfigError(f"hook {spec!r}: cannot import {module_name}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise AgentConfigError(f"hook {spec!r}: {module_name} has no callable {attribute!r}")
    return factory()
