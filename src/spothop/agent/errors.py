"""The on-instance agent's own errors; the contract's (ControlPlaneError, …) are in :mod:`spothop.wire.errors`.

::

    SpothopError
    └── AgentError                  (spothop.wire.errors)
        └── NoticeEndpointError     the metadata endpoint was unreachable or gave a bad answer (exit 4)
"""

from __future__ import annotations

from spothop.errors import EXIT_UNAVAILABLE
from spothop.wire.errors import AgentError


class NoticeEndpointError(AgentError):
    """One poll of the metadata endpoint failed: unreachable, timed out, 5xx, or an answer that does not parse.

    Watchers raise it; the watch loop counts it, backs off, and applies the
    worst-case rule (see :mod:`spothop.agent.watch`). It never escapes the loop.
    """

    exit_code = EXIT_UNAVAILABLE
