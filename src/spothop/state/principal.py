"""Who a valid API token speaks for (:class:`Principal`), as :mod:`spothop.state.tokens` answers it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Principal:
    """Who a valid token speaks for: a user of a project, or the agent of one job's instance."""

    kind: str  # "user" | "agent"
    token_id: str
    user: str | None = None
    user_id: str | None = None
    project: str | None = None
    job_id: str | None = None
    instance_id: str | None = None
    launch_token: str | None = None  # an agent token issued for a launch (spothop.state.tokens, 3a)

    @property
    def unbound(self) -> bool:
        """An agent token issued for a launch and not yet bound to its instance (the tokens contract, 3a)."""
        return self.launch_token is not None and self.instance_id == self.launch_token

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
