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
        ├── LogOffsetGap            a log chunk starts past the attempt's stored end (carries the end)
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


class LogOffsetGap(AgentError):
    """A log chunk starts past what the store holds of its attempt's output: storing it would
    leave a hole. ``end_bytes`` is the stored end: resend from there."""

    def __init__(self, attempt_id: str, offset_bytes: int, end_bytes: int) -> None:
        super().__init__(
            f"the log chunk of attempt {attempt_id} at byte {offset_bytes} leaves a gap: the store"
            f" holds its output up to byte {end_bytes}; resend from byte {end_bytes}"
        )
        self.attempt_id = attempt_id
        self.offset_bytes = offset_bytes
        self.end_bytes = end_bytes
