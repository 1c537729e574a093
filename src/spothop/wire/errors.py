"""The errors of the agent <-> control-plane contract, under spothop's one tree (:mod:`spothop.errors`).

Both sides raise and catch them (the agent, the control plane's store side,
the server), so they live on the ground floor with the contract itself. The
agent's own errors (:mod:`spothop.agent.errors`) hang under the same
:class:`AgentError`::

    SpothopError
    ├── ConfigError
    │   └── AgentConfigError        a bad agent option: unknown protocol, bad hook spec,
    │                               a --control-plane that names no control plane
    └── AgentError                  the on-instance agent failed at something on purpose
        ├── NoticeEndpointError     the metadata endpoint was unreachable or gave a bad answer (exit 4)
        │                           (spothop.agent.errors)
        ├── EventFormatError        a stored or received agent event is not an event
        ├── ControlPlaneError       the control plane refused a call or did not answer
        │   └── ControlPlaneAuthError   it refused the agent's token (HTTP 401/403)
        └── StoreRefused            the embedded plane's store process answered with the store's or
                                    queue's own error (not an outage, so no fallback)
"""

from __future__ import annotations

from spothop.errors import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, ConfigError, SpothopError


class AgentConfigError(ConfigError):
    """An agent option is wrong (an unknown protocol, a hook that does not import); the message says how."""


class AgentError(SpothopError):
    """Root of the on-instance agent's own errors."""


class ControlPlaneError(AgentError):
    """A control-plane call failed: unreachable, timed out, or refused; the message names the URL and why.

    The agent never lets it stop the emergency protocol: events are spooled and
    leases are released through the queue directly where that is reachable.
    """

    exit_code = EXIT_UNAVAILABLE


class ControlPlaneAuthError(ControlPlaneError):
    """The control plane refused the agent's token (HTTP 401 or 403): retrying will not help."""

    exit_code = EXIT_BAD_INPUT


class EventFormatError(AgentError):
    """A stored or received agent event is not an event: a required field is missing or of the wrong type."""


class StoreRefused(AgentError):
    """The store process answered, with an error of the store or the queue behind it (not an outage)."""
