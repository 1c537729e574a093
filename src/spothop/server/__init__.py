"""``spothop server``: the control plane over HTTP — the user API, the agent API, the dashboard.

- :mod:`~spothop.server.app`: :func:`create_app`, the FastAPI app over one store and queue.
- :mod:`~spothop.server.settings`: :class:`Settings` (environment, then flags).
- :mod:`~spothop.server.auth`: tokens read, checked and scoped; failed attempts rate-limited.
- :mod:`~spothop.server.agents`, :mod:`~spothop.server.users`,
  :mod:`~spothop.server.dashboard`: the routes.
- the JSON answers are :mod:`spothop.service`'s results, the same the CLI's ``--json`` prints.
- :mod:`~spothop.server.safety`: no credential in any response or log line.

FastAPI, uvicorn and argon2-cffi are core dependencies (every controller runs the agent API);
the ``server`` extra adds PostgreSQL, Redis and httpx. Importing this package loads none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spothop.server.app import create_app
    from spothop.server.settings import Settings

__all__ = ["Settings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from spothop.server.app import create_app

        return create_app
    if name == "Settings":
        from spothop.server.settings import Settings

        return Settings
    raise AttributeError(f"module 'spothop.server' has no attribute {name!r}")
