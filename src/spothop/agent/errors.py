"""The agent's errors, under spothop's one tree (:mod:`spothop.errors`).

::

    SpothopError
    ├── ConfigError
    │   └── AgentConfigError        a bad agent option: unknown protocol, bad hook spec
    └── AgentError                  the on-instance agent failed at something on purpose
        └── NoticeEndpointError     the metadata endpoint was unreachable or gave a bad answer (exit 4)
"""

from __future__ import annotations

from spothop.errors import EXIT_UNAVAILABLE, ConfigError, SpothopError


class AgentConfigError(ConfigError):
    """An agent option is wrong (an unknown protocol, a hook that does not import); the message says how."""


class AgentError(SpothopError):
    """Root of the on-instance agent's own errors."""


class NoticeEndpointError(AgentError):
    """One poll of the metadata endpoint failed: unreachable, timed out, 5xx, or an answer that does not parse.

    Watchers raise it; the watch loop counts it, backs off, and applies the
    worst-case rule (see :mod:`spothop.agent.watch`). It never escapes the loop.
    """

    exit_code = EXIT_UNAVAILABLE
